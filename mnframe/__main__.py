"""``python -m mnframe``: the declarative runner (see mnframe.cli)."""

from mnframe.cli import main

if __name__ == "__main__":
    main()
