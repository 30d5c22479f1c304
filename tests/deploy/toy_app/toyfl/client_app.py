"""Toy ClientApp: adds ``partition-id + 1`` to every element of the received array."""

import os
import time

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    partition_id = int(context.node_config["partition-id"])
    time.sleep(float(context.run_config.get("train-sleep", 0.0)))
    arrays = msg.content["arrays"].to_numpy_ndarrays()
    updated = [a + (partition_id + 1) for a in arrays]
    content = RecordDict(
        {
            "arrays": ArrayRecord(updated),
            "metrics": MetricRecord({"num-examples": 1, "partition-id": partition_id, "pid": os.getpid()}),
        }
    )
    return Message(content=content, reply_to=msg)
