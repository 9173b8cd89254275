"""``python -m mnframe``: the declarative runner (see mnframe.commands.cli)."""

from mnframe.commands.cli import main

if __name__ == "__main__":
    main()
