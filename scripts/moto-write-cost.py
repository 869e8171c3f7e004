#!/usr/bin/env python3
"""What one lease-table write costs moto, by the shape of the UpdateItem.

Run with the local stack up, from the project root, with the stack's own Python:

    .local-stack/venv/bin/python scripts/moto-write-cost.py

It sends 200 UpdateItem calls of each shape straight to moto (127.0.0.1:4568, not through the
router) and prints moto's CPU time per call, read from /proc for the pid in
.local-stack/dynamodb.pid, and the wall time per call. The shapes are the ones
DynamoLeaseStore sends: a checkpoint write conditioned on the owner, answering the whole row
(ALL_NEW) or only the updated attributes (UPDATED_NEW), and a GetItem for comparison.
"""
import os
import time

import boto3

CALLS = 200
client = boto3.client(
    "dynamodb",
    endpoint_url=os.environ.get("MOTO_ENDPOINT", "http://127.0.0.1:4568"),
    region_name="us-east-1",
    aws_access_key_id="test",
    aws_secret_access_key="test",
)
table = "moto-write-cost-%d" % os.getpid()
pid = int(open(".local-stack/dynamodb.pid").read())


def cpu_seconds():
    fields = open("/proc/%d/stat" % pid).read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def measure(name, call):
    cpu, wall = cpu_seconds(), time.time()
    for _ in range(CALLS):
        call()
    print("%-34s moto CPU %.2f ms/call, wall %.2f ms/call"
          % (name, (cpu_seconds() - cpu) * 1000 / CALLS, (time.time() - wall) * 1000 / CALLS))


client.create_table(
    TableName=table,
    KeySchema=[{"AttributeName": "lease_key", "KeyType": "HASH"}],
    AttributeDefinitions=[{"AttributeName": "lease_key", "AttributeType": "S"}],
    BillingMode="PAY_PER_REQUEST",
)
key = {"lease_key": {"S": "orders:shardId-000000000000"}}
client.update_item(
    TableName=table, Key=key,
    UpdateExpression="SET lease_owner = :me, lease_expiry = :e ADD lease_counter :one",
    ExpressionAttributeValues={":me": {"S": "a"}, ":e": {"N": "1"}, ":one": {"N": "1"}},
)
checkpoint = dict(
    TableName=table, Key=key,
    UpdateExpression="SET checkpoint = :c, lease_expiry = :e ADD lease_counter :one",
    ConditionExpression="lease_owner = :me",
    ExpressionAttributeValues={
        ":me": {"S": "a"},
        ":c": {"S": "49590338271490256608559692538361571095921575989136588898"},
        ":e": {"N": "123"},
        ":one": {"N": "1"},
    },
)
try:
    measure("checkpoint+renew, ALL_NEW", lambda: client.update_item(
        ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD", **checkpoint))
    measure("checkpoint+renew, UPDATED_NEW", lambda: client.update_item(
        ReturnValues="UPDATED_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD", **checkpoint))
    measure("GetItem, consistent", lambda: client.get_item(
        TableName=table, Key=key, ConsistentRead=True))
finally:
    client.delete_table(TableName=table)
