"""``python3 -m perfgate`` runs the command line."""
from perfgate.cli import main

if __name__ == "__main__":
    main()
