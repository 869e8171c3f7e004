#!/usr/bin/env python3
"""AWS's own KPL aggregation library (aws-kinesis-agg on PyPI), for the crate's interop tests.

    kpl-agg.py aggregate   < user records    > Kinesis records
    kpl-agg.py deaggregate < Kinesis records > user records

Both read and write one JSON list; each item is {"pk": str, "ehk": str or null, "data": base64}.
`aggregate` packs the user records in order with aws_kinesis_agg.aggregator.RecordAggregator
(a new record whenever one is full); `deaggregate` reads records with
aws_kinesis_agg.deaggregator, as a Lambda consumer would, and adds each user record's "sub"
(its sub-sequence number). The local stack's virtualenv has the library
(scripts/local-stack.sh install).
"""

import base64
import json
import sys

from aws_kinesis_agg import aggregator, deaggregator


def aggregate(items):
    out = []

    def emit(record):
        pk, ehk, data = record.get_contents()
        out.append({"pk": pk, "ehk": ehk, "data": base64.b64encode(data).decode()})

    packer = aggregator.RecordAggregator()
    for item in items:
        full = packer.add_user_record(item["pk"], base64.b64decode(item["data"]), item.get("ehk"))
        if full is not None:
            emit(full)
    if packer.get_num_user_records() > 0:
        emit(packer.clear_and_get())
    return out


def deaggregate(items):
    records = [
        {
            "eventSource": "aws:kinesis",
            "eventVersion": "1.0",
            "eventID": f"shardId-000000000000:{n}",
            "eventName": "aws:kinesis:record",
            "invokeIdentityArn": "arn:aws:iam::000000000000:role/interop",
            "awsRegion": "us-east-1",
            "eventSourceARN": "arn:aws:kinesis:us-east-1:000000000000:stream/interop",
            "kinesis": {
                "kinesisSchemaVersion": "1.0",
                "approximateArrivalTimestamp": 1700000000.0,
                "partitionKey": item["pk"],
                "explicitHashKey": item.get("ehk"),
                "data": item["data"],
                "sequenceNumber": str(49000000000000000000000000000000000000000000000000000000 + n),
            }
        }
        for n, item in enumerate(items)
    ]
    out = []
    for record in deaggregator.deaggregate_records(records):
        kinesis = record["kinesis"]
        data = kinesis["data"]
        out.append(
            {
                "pk": kinesis["partitionKey"],
                "ehk": kinesis.get("explicitHashKey"),
                "data": data.decode() if isinstance(data, bytes) else data,
                "sub": kinesis.get("subSequenceNumber"),
            }
        )
    return out


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("aggregate", "deaggregate"):
        sys.exit(__doc__)
    items = json.load(sys.stdin)
    json.dump(aggregate(items) if mode == "aggregate" else deaggregate(items), sys.stdout)


if __name__ == "__main__":
    main()
