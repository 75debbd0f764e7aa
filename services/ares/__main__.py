"""``python -m ares``: the same entry point as the ``ares`` console script."""

from ares.cli import main

if __name__ == "__main__":
    main()
