"""``python -m pipeline key=value ...``: run one job (see pipeline.app)."""

import sys

from pipeline.app import main
from pipeline.cli import check_group_choices

if __name__ == "__main__":
    error = check_group_choices(sys.argv[1:])
    if error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    main()
