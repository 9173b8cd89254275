"""``CommunicatorBase``: the interface every mnframe communicator implements.

Names and signatures follow the ChainerMN API reference. Methods
without a suffix move NumPy/CuPy arrays; ``*_obj`` methods move picklable
Python objects; ``multi_node_mean_grad``/``bcast_data`` work on Chainer links.
The implementation shared by all names is ``MpiCommunicator``; this module
stays import-light (no mpi4py) so that type checks and docs need no MPI.
"""

import abc
import contextlib
import warnings


class CommunicatorBase(abc.ABC):
    """Interface definition of all communicators."""

    # -- topology
    @property
    @abc.abstractmethod
    def rank(self):
        """Rank (process id in the cluster) of this process in integer."""

    @property
    @abc.abstractmethod
    def size(self):
        """Number of processes of the cluster."""

    @property
    @abc.abstractmethod
    def intra_rank(self):
        """Intra rank (process id in the machine) of this process."""

    @property
    @abc.abstractmethod
    def intra_size(self):
        """Number of processes in the machine of this process."""

    @property
    @abc.abstractmethod
    def inter_rank(self):
        """The rank of this node in the cluster."""

    @property
    @abc.abstractmethod
    def inter_size(self):
        """Number of nodes that participates the cluster."""

    @property
    @abc.abstractmethod
    def mpi_comm(self):
        """The mpi4py communicator this communicator runs on."""

    # -- configuration (per instance)
    @abc.abstractmethod
    def set_config(self, name, value=True, **kwargs):
        """Set configuration ``name`` (e.g. ``batched_copy``, ``allreduce_grad_dtype``)."""

    @abc.abstractmethod
    def get_config(self, name=None):
        """The value of configuration ``name``, or a dict of all when ``name`` is None."""

    @property
    def _configs(self):
        """This instance's configuration dict (name -> value); ChainerMN shares one dict per class."""
        return self.__dict__.setdefault("_configs", {})

    @property
    def within_config_scope(self):
        """True inside ``config_scope()``: attributes set there are recorded as configuration."""
        return self.__dict__.get("_within_config_scope", False)

    @contextlib.contextmanager
    def config_scope(self):
        """A scope in which ``self.name = value`` also records ``name`` in this instance's configuration."""
        old = self.within_config_scope
        self.__dict__["_within_config_scope"] = True
        try:
            yield
        finally:
            self.__dict__["_within_config_scope"] = old

    def __setattr__(self, name, value):
        if self.within_config_scope:
            self._configs[name] = value
        super().__setattr__(name, value)

    @abc.abstractmethod
    def split(self, color, key):
        """A communicator over the ranks that pass the same ``color`` (ordered by ``key``)."""

    # -- arrays
    @abc.abstractmethod
    def alltoall(self, xs):
        """All-to-all of a tuple of ``size`` arrays; returns a tuple of ``size`` arrays."""

    @abc.abstractmethod
    def send(self, data, dest, tag):
        """Send an array (or a tuple/list of arrays) to rank ``dest``."""

    @abc.abstractmethod
    def recv(self, source, tag):
        """Receive what ``send`` sent from ``source`` (a tuple if a tuple was sent)."""

    @abc.abstractmethod
    def bcast(self, data, max_buf_len=None, root=0):
        """Broadcast an array from ``root``; returns it on every rank."""

    @abc.abstractmethod
    def gather(self, data, root=0):
        """Gather arrays to ``root``: a tuple there, None on other ranks."""

    @abc.abstractmethod
    def allgather(self, x):
        """Every rank's array, as a tuple on every rank."""

    @abc.abstractmethod
    def allreduce(self, data):
        """Element-wise sum of every rank's array."""

    @abc.abstractmethod
    def scatter(self, xs, root=0):
        """Scatter a tuple of ``size`` arrays (or an array along axis 0) from ``root``."""

    def finalize(self):  # noqa: B027 - a no-op by default, not abstract
        """Release internal resources; the communicator must not be used afterwards."""

    # -- objects
    @abc.abstractmethod
    def send_obj(self, obj, dest, tag=0):
        """Send a picklable object to ``dest``."""

    @abc.abstractmethod
    def recv_obj(self, source, tag=None, status=None):
        """Receive an object sent by ``send_obj`` (``tag=None``: any tag; ``status``: an ``MPI.Status`` to fill)."""

    @abc.abstractmethod
    def bcast_obj(self, obj, max_buf_len=None, root=0):
        """Broadcast an object from ``root``."""

    @abc.abstractmethod
    def gather_obj(self, obj, root=0):
        """A list of every rank's object on ``root``; None elsewhere."""

    @abc.abstractmethod
    def allreduce_obj(self, obj):
        """Sum (``+``) of every rank's object, on every rank."""

    # -- models
    @abc.abstractmethod
    def bcast_data(self, model):
        """Broadcast the parameter data of ``model`` from rank 0."""

    def broadcast_data(self, model):
        """Deprecated alias of ``bcast_data``."""
        self.bcast_data(model)

    @abc.abstractmethod
    def multi_node_mean_grad(self, model, zero_fill=False):
        """Average the gradients of ``model`` over all ranks, in place."""

    def allreduce_grad(self, model, zero_fill=False):
        """Deprecated name of ``multi_node_mean_grad`` (kept for ChainerMN scripts)."""
        warnings.warn("allreduce_grad() is deprecated; use multi_node_mean_grad()", DeprecationWarning, stacklevel=2)
        self.multi_node_mean_grad(model, zero_fill)
