"""``python3 -m perfgate`` runs the command line.

A dependency the command line itself imports (click) that cannot be imported is reported as
the commands report one (exit 2, the package and its install command), not as a traceback."""
import sys

from perfgate.errors import missing_dependency

try:
    from perfgate.cli import main
except ImportError as e:
    missing = missing_dependency(e)
    if missing is None:
        raise
    print(f"perfgate: {missing.kind.replace('_', ' ')}: {missing.render()}", file=sys.stderr)
    sys.exit(missing.exit_code)

if __name__ == "__main__":
    main()
