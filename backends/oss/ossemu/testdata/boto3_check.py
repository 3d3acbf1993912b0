"""Drives the emulator with boto3 (run by boto3_test.go).

argv: endpoint bucket signature-version data-dir. The key pair comes in
EMU_AK / EMU_SK (never on a command line). Every check raises on failure;
the Go test then compares the stored files with data-dir's.
"""
import hashlib
import os
import sys
import time

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

ep, bucket, sig, d = sys.argv[1:5]
if os.environ.get("EMU_TRACE_HTTP"):
    import logging
    boto3.set_stream_logger("urllib3", logging.DEBUG)
ak, sk = os.environ["EMU_AK"], os.environ["EMU_SK"]


def client(secret):
    cfg = Config(signature_version=sig, s3={"addressing_style": "path"},
                 retries={"max_attempts": 1, "mode": "standard"})
    return boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak,
                        aws_secret_access_key=secret, region_name="us-east-1", config=cfg)


T0 = time.monotonic()


def check(cond, what):
    if os.environ.get("EMU_TRACE"):
        print("%.2f %s" % (time.monotonic() - T0, what), file=sys.stderr)
    if not cond:
        raise AssertionError(what)


def md5(b):
    return hashlib.md5(b).hexdigest()


def etag(e):
    return e.strip('"').lower()


s3 = client(sk)
small = open(os.path.join(d, "small"), "rb").read()
big = open(os.path.join(d, "big"), "rb").read()
p = sig + "/"

# put_object, from bytes and from a file object, head_object ETag = MD5.
r = s3.put_object(Bucket=bucket, Key=p + "small", Body=small, Metadata={"who": "boto3"})
check(etag(r["ETag"]) == md5(small), "put ETag %s" % r["ETag"])
with open(os.path.join(d, "big"), "rb") as f:
    s3.put_object(Bucket=bucket, Key=p + "big", Body=f)
h = s3.head_object(Bucket=bucket, Key=p + "small")
check(etag(h["ETag"]) == md5(small), "head ETag %s" % h["ETag"])
check(h["ContentLength"] == len(small), "head length %d" % h["ContentLength"])
check(h["Metadata"].get("who") == "boto3", "metadata %r" % h["Metadata"])
h = s3.head_object(Bucket=bucket, Key=p + "big")
check(etag(h["ETag"]) == md5(big), "head ETag of big %s" % h["ETag"])

# get_object with Range.
g = s3.get_object(Bucket=bucket, Key=p + "big", Range="bytes=1000-1999")
check(g["Body"].read() == big[1000:2000], "range body")
check(g["ContentRange"] == "bytes 1000-1999/%d" % len(big), "Content-Range %s" % g["ContentRange"])
check(s3.get_object(Bucket=bucket, Key=p + "small")["Body"].read() == small, "full body")

# list_objects_v2 with paging (MaxKeys 2 over 5 keys), then a delimiter.
for i in range(5):
    s3.put_object(Bucket=bucket, Key="%slist/k%d" % (p, i), Body=b"x" * i)
# botocore signs a path-style ListObjectsV2 wrongly with SigV2 (its
# string to sign ends "?list-type=2", which S3 does not sign: boto/boto3
# issue 4433), so V2 lists with ListObjects (markers) instead.
v2 = sig == "s3"
lister = s3.list_objects if v2 else s3.list_objects_v2
keys, token, pages = [], None, 0
while True:
    kw = {"Bucket": bucket, "Prefix": p + "list/", "MaxKeys": 2}
    if token:
        kw["Marker" if v2 else "ContinuationToken"] = token
    r = lister(**kw)
    pages += 1
    keys += [o["Key"] for o in r.get("Contents", [])]
    if not r["IsTruncated"]:
        break
    token = r["Contents"][-1]["Key"] if v2 else r["NextContinuationToken"]
check(keys == ["%slist/k%d" % (p, i) for i in range(5)] and pages == 3, "paged list %r in %d pages" % (keys, pages))
r = lister(Bucket=bucket, Prefix=p, Delimiter="/")
check([c["Prefix"] for c in r.get("CommonPrefixes", [])] == [p + "list/"], "common prefixes %r" % r.get("CommonPrefixes"))
check(sorted(o["Key"] for o in r["Contents"]) == [p + "big", p + "small"], "delimited list %r" % r["Contents"])
pg = s3.get_paginator("list_objects" if v2 else "list_objects_v2")
check(sum(len(pp.get("Contents", [])) for pp in pg.paginate(Bucket=bucket, Prefix=p + "list/", PaginationConfig={"PageSize": 2})) == 5, "paginator")

# botocore's SigV2 signer also appends a sub-resource already in a
# path-style request's path ("/bkt/k?uploads?uploads"), so multipart,
# delete_objects, ACL and tagging requests run with SigV4 only.
if not v2:
    # Multipart: create, two parts (5 MiB + rest), complete; ETag is the
    # MD5 of the part MD5s with "-2".
    PART = 5 << 20
    mp = s3.create_multipart_upload(Bucket=bucket, Key=p + "mp")
    uid = mp["UploadId"]
    parts = []
    for n, chunk in ((1, big[:PART]), (2, big[PART:])):
        r = s3.upload_part(Bucket=bucket, Key=p + "mp", UploadId=uid, PartNumber=n, Body=chunk)
        check(etag(r["ETag"]) == md5(chunk), "part %d ETag" % n)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    lp = s3.list_parts(Bucket=bucket, Key=p + "mp", UploadId=uid)
    check([x["PartNumber"] for x in lp["Parts"]] == [1, 2], "list_parts %r" % lp["Parts"])
    r = s3.complete_multipart_upload(Bucket=bucket, Key=p + "mp", UploadId=uid, MultipartUpload={"Parts": parts})
    want = hashlib.md5(hashlib.md5(big[:PART]).digest() + hashlib.md5(big[PART:]).digest()).hexdigest() + "-2"
    check(etag(r["ETag"]) == want, "multipart ETag %s want %s" % (r["ETag"], want))
    check(s3.get_object(Bucket=bucket, Key=p + "mp")["Body"].read() == big, "multipart body")
    # Abort: the upload is gone, no object appears.
    ab = s3.create_multipart_upload(Bucket=bucket, Key=p + "aborted")
    s3.upload_part(Bucket=bucket, Key=p + "aborted", UploadId=ab["UploadId"], PartNumber=1, Body=b"gone")
    s3.abort_multipart_upload(Bucket=bucket, Key=p + "aborted", UploadId=ab["UploadId"])
    ups = s3.list_multipart_uploads(Bucket=bucket, Prefix=p).get("Uploads", [])
    check(ups == [], "uploads after abort %r" % ups)
    try:
        s3.head_object(Bucket=bucket, Key=p + "aborted")
        raise AssertionError("aborted upload left an object")
    except ClientError as e:
        check(e.response["Error"]["Code"] in ("404", "NoSuchKey"), "head aborted: %r" % e.response["Error"])
    try:
        s3.list_parts(Bucket=bucket, Key=p + "aborted", UploadId=ab["UploadId"])
        raise AssertionError("list_parts of an aborted upload")
    except ClientError as e:
        check(e.response["Error"]["Code"] == "NoSuchUpload", "list aborted: %r" % e.response["Error"])

# copy_object, then delete_objects.
r = s3.copy_object(Bucket=bucket, Key=p + "copy", CopySource={"Bucket": bucket, "Key": p + "small"})
check(etag(r["CopyObjectResult"]["ETag"]) == md5(small), "copy ETag")
check(s3.get_object(Bucket=bucket, Key=p + "copy")["Body"].read() == small, "copy body")
if v2:
    for i in range(5):
        s3.delete_object(Bucket=bucket, Key="%slist/k%d" % (p, i))
else:
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "%slist/k%d" % (p, i)} for i in range(5)]})
    check(sorted(x["Key"] for x in r["Deleted"]) == ["%slist/k%d" % (p, i) for i in range(5)], "deleted %r" % r["Deleted"])
check(lister(Bucket=bucket, Prefix=p + "list/").get("Contents", []) == [], "keys left after delete")

if not v2:
    # ACL and tags.
    s3.put_object_acl(Bucket=bucket, Key=p + "copy", ACL="public-read")
    s3.put_object_tagging(Bucket=bucket, Key=p + "copy", Tagging={"TagSet": [{"Key": "a", "Value": "1"}]})
    t = s3.get_object_tagging(Bucket=bucket, Key=p + "copy")["TagSet"]
    check(t == [{"Key": "a", "Value": "1"}], "tags %r" % t)
    s3.delete_object_tagging(Bucket=bucket, Key=p + "copy")
    check(s3.get_object_tagging(Bucket=bucket, Key=p + "copy")["TagSet"] == [], "tags after delete")
    g = s3.get_object_acl(Bucket=bucket, Key=p + "copy")
    grants = sorted((x["Grantee"]["Type"], x["Grantee"].get("URI", x["Grantee"].get("ID")), x["Permission"]) for x in g["Grants"])
    check(grants == [("CanonicalUser", g["Owner"]["ID"], "FULL_CONTROL"),
                     ("Group", "http://acs.amazonaws.com/groups/global/AllUsers", "READ")], "grants %r" % g["Grants"])
    s3.put_object_acl(Bucket=bucket, Key=p + "copy", ACL="private")
    check(len(s3.get_object_acl(Bucket=bucket, Key=p + "copy")["Grants"]) == 1, "grants after private")

# A wrong secret: 403 SignatureDoesNotMatch, nothing written.
try:
    client("wrong-secret").put_object(Bucket=bucket, Key=p + "forged", Body=b"no")
    raise AssertionError("wrong secret accepted")
except ClientError as e:
    check(e.response["Error"]["Code"] == "SignatureDoesNotMatch", "wrong secret: %r" % e.response["Error"])
print("ok", boto3.__version__)
