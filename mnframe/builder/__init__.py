"""One small builder per pipeline step (numbered as in docs/architecture.md), each taking its
typed config section and checking it (``*_issues``, gathered by ``validate.py``)."""
