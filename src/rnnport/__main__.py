"""``python -m rnnport`` runs the command line."""

from rnnport.cli import main_entry

main_entry()
