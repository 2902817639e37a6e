"""`python -m normgen.bench`: the benchmark's command line (normgen.bench.cli)."""
from normgen.bench.cli import main

if __name__ == "__main__":
    main()
