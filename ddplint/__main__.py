"""Allow ``python -m ddplint`` (and ``torchrun -m ddplint confirm ...``)."""

from ddplint.cli import main

if __name__ == "__main__":
    main()
