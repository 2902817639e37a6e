"""`python -m normgen`: the same command line as the `normgen` script and generate.py."""
from normgen.cli import main

if __name__ == "__main__":
    main()
