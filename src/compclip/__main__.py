"""`python -m compclip` runs the command line."""
from .cli import main

main()
