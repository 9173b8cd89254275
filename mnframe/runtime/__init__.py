"""Process-level concerns: aborting the whole job on one rank's failure (``guard``),
collective deadlines (``watchdog``), the per-rank operation log (``oplog``) and
its cross-rank check (``debug``), graceful preemption (``preemption``), BLAS
thread pools per rank (``threads``), what creating a communicator switches on
(``activation``), and the errors and exit statuses (``errors``). The training
device is chosen by ``mnframe.builder.placement``."""
