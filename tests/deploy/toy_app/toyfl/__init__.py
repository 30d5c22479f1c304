"""Toy Flower app for the LocalDeployment tests (no dependency beyond flwr and numpy)."""
