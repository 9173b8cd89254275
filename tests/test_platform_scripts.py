"""A ChainerMN script as users write it trains on 2 ranks in this environment (issue 15, item 5).

``import chainer`` comes first and ``import mnframe as chainermn`` second, as in
every ChainerMN script: under NumPy 2, Python >= 3.12 or without setuptools
that works only through mnframe's installed import hook. The script runs in a
fresh interpreter per rank under ``mpiexec -n 2`` with a timeout; the test
checks that training happened (log entries, falling loss, accuracy) and that
each rank got the shard its rank and the world size call for.
"""

import json
import textwrap

from mnframe.testing import run_mpi

N_RANKS = 2
EPOCHS = 4
N_TRAIN, N_TEST = 1500, 297  # the bundled digits: mnframe.recipes.mnist.data

SCRIPT = """
import json
import sys

import chainer                      # first, like every ChainerMN script
import chainer.functions as F
import chainer.links as L
from chainer import training
from chainer.training import extensions

assert "mnframe" not in sys.modules
import mnframe as chainermn         # second
from mnframe.recipes.mnist.data import get_datasets


class MLP(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, 64)
            self.l2 = L.Linear(None, 10)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


out, epochs = sys.argv[1], int(sys.argv[2])
comm = chainermn.create_communicator("naive")
model = L.Classifier(MLP())
optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(alpha=0.01), comm)
optimizer.setup(model)
train, test = get_datasets() if comm.rank == 0 else (None, None)
train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=0)
test = chainermn.scatter_dataset(test, comm)
with open(f"{out}-shard{comm.rank}.json", "w") as f:  # a file per rank: the ranks' stdout lines can interleave
    json.dump({"rank": comm.rank, "size": comm.size, "train": len(train), "test": len(test)}, f)
train_iter = chainer.iterators.SerialIterator(train, 50)
test_iter = chainer.iterators.SerialIterator(test, 50, repeat=False, shuffle=False)
updater = training.StandardUpdater(train_iter, optimizer)
trainer = training.Trainer(updater, (epochs, "epoch"), out=out)
trainer.extend(chainermn.create_multi_node_evaluator(extensions.Evaluator(test_iter, model), comm))
if comm.rank == 0:
    trainer.extend(extensions.LogReport())
trainer.run()
"""


def test_chainermn_style_script_chainer_imported_first_trains_on_2_ranks(tmp_path):
    script = tmp_path / "train_chainermn.py"
    script.write_text(textwrap.dedent(SCRIPT))
    result = run_mpi([script, tmp_path / "result", EPOCHS], n=N_RANKS, timeout=300, cwd=str(tmp_path))
    assert not result.timed_out, result.output[-4000:]
    assert result.returncode == 0, result.output[-6000:]

    # scatter_dataset's default force_equal_length=True: every rank gets ceil(n / size) examples
    expect_train, expect_test = -(-N_TRAIN // N_RANKS), -(-N_TEST // N_RANKS)
    for rank in range(N_RANKS):
        shard = json.loads((tmp_path / f"result-shard{rank}.json").read_text())
        assert shard == {"rank": rank, "size": N_RANKS, "train": expect_train, "test": expect_test}

    log = json.loads((tmp_path / "result" / "log").read_text())
    assert [entry["epoch"] for entry in log] == list(range(1, EPOCHS + 1))
    assert log[-1]["main/loss"] < 0.6 * log[0]["main/loss"]
    assert log[-1]["validation/main/accuracy"] > 0.85
