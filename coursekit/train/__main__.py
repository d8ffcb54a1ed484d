"""``python -m coursekit.train --help``: the training engine every lab submits."""

from coursekit.train.engine import main

if __name__ == "__main__":
    raise SystemExit(main())
