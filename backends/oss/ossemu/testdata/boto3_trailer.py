"""Uploads with boto3 over TLS, where current botocore sends flexible
checksums as aws-chunked trailers (run by streaming_test.go).

argv: endpoint bucket. The key pair comes in EMU_AK / EMU_SK. Prints
botocore's version; every check raises on failure.
"""
import io
import os
import sys
import zlib

import boto3
import botocore
import urllib3
from botocore.config import Config

urllib3.disable_warnings()
ep, bucket = sys.argv[1:3]
ak, sk = os.environ["EMU_AK"], os.environ["EMU_SK"]
cfg = Config(signature_version="s3v4", s3={"addressing_style": "path"},
             retries={"max_attempts": 1, "mode": "standard"})
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key=sk,
                  region_name="us-east-1", config=cfg, verify=False)
data = bytes(range(256)) * 4000
s3.put_object(Bucket=bucket, Key="tls/put", Body=io.BytesIO(data))
got = s3.get_object(Bucket=bucket, Key="tls/put")["Body"].read()
if got != data:
    raise AssertionError("get after put: %d bytes, want %d" % (len(got), len(data)))
print("botocore %s crc32 %d" % (botocore.__version__, zlib.crc32(data)))
