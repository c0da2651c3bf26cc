"""python3 -m perfgate: the same command line as the perfgate entry point."""
from perfgate.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
