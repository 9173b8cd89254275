"""The runner's configuration: composition (Hydra), schema (pydantic), validation
and the static check of a model-parallel rank graph."""
