"""One small builder per pipeline step, each taking its typed config section."""
