"""`python -m broker.cli`: the same as the `broker` console script."""

from broker.cli.main import main

main()
