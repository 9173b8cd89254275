"""The DCGAN updater: one discriminator step and one generator step per batch.

A ``StandardUpdater`` with two optimizers, ``'gen'`` and ``'dis'``; the models
are the optimizers' targets (``models=(gen, dis)`` as in Chainer's example, or
``models={'gen': ..., 'dis': ...}``, is accepted too). Losses are the
non-saturating GAN losses written with softplus; ``gen/loss`` and ``dis/loss``
are reported.
"""

import chainer
import chainer.functions as F
from chainer import training


class DCGANUpdater(training.updaters.StandardUpdater):
    def __init__(self, iterator, optimizer, models=None, **kwargs):
        missing = {"gen", "dis"} - set(optimizer) if isinstance(optimizer, dict) else {"gen", "dis"}
        if missing:
            raise ValueError(
                f"DCGANUpdater needs a dict of optimizers with keys 'gen' and 'dis' (missing: {sorted(missing)})"
            )
        if isinstance(models, dict):
            self.gen, self.dis = models["gen"], models["dis"]
        elif models is not None:
            self.gen, self.dis = models
        else:
            self.gen, self.dis = optimizer["gen"].target, optimizer["dis"].target
        super().__init__(iterator, optimizer, **kwargs)

    def loss_dis(self, dis, y_fake, y_real):
        batchsize = len(y_fake)
        loss = (F.sum(F.softplus(-y_real)) + F.sum(F.softplus(y_fake))) / batchsize
        chainer.report({"loss": loss}, dis)
        return loss

    def loss_gen(self, gen, y_fake):
        loss = F.sum(F.softplus(-y_fake)) / len(y_fake)
        chainer.report({"loss": loss}, gen)
        return loss

    def update_core(self):
        gen_optimizer = self.get_optimizer("gen")
        dis_optimizer = self.get_optimizer("dis")
        batch = self.get_iterator("main").next()
        x_real = chainer.Variable(self.converter(batch, self.device))
        y_real = self.dis(x_real)
        z = chainer.Variable(self.gen.make_hidden(len(batch)))
        x_fake = self.gen(z)
        y_fake = self.dis(x_fake)
        dis_optimizer.update(self.loss_dis, self.dis, y_fake, y_real)
        gen_optimizer.update(self.loss_gen, self.gen, y_fake)
