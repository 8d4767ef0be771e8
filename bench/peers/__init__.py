"""Peers of memtier's ingest benchmark (deltalake, pypaimon), run in their own venv.

``setup.sh`` makes bench/.venv-peers; ``run_peers.py`` runs there and prints JSON;
``bench/peers_report.py`` drives both from the project venv.
"""
