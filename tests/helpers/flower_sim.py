"""Run a config through Flower's simulation engine (Ray) in its own process.

python tests/helpers/flower_sim.py <config.yaml> <output-dir> <num-supernodes> [overrides]
"""

import sys

from flwr.simulation import run_simulation

from lightning_fed.deploy.apps import make_client_app, make_server_app

if __name__ == "__main__":
    config, out, nodes = sys.argv[1], sys.argv[2], int(sys.argv[3])
    settings = {"config": config, "overrides": sys.argv[4] if len(sys.argv) > 4 else ""}
    run_simulation(
        make_server_app(**settings, **{"output-dir": out}),
        make_client_app(**settings),
        num_supernodes=nodes,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
    )
