"""Browser form uploads (PostObject) with boto3's generate_presigned_post,
posted as multipart/form-data by urllib3 (botocore's own HTTP library, so
present wherever boto3 is), as a web application hands them to a browser
(run by postobject_test.go).

argv: endpoint bucket signature-version. The key pair comes in EMU_AK /
EMU_SK. Every check raises on failure; the Go test then compares the
stored files.
"""
import hashlib
import os
import sys

import boto3
import urllib3
from botocore.config import Config

ep, bucket, sig = sys.argv[1:4]
ak, sk = os.environ["EMU_AK"], os.environ["EMU_SK"]


def client(secret):
    cfg = Config(signature_version=sig, s3={"addressing_style": "path"})
    return boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak,
                        aws_secret_access_key=secret, region_name="us-east-1", config=cfg)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


class Resp:
    def __init__(self, r):
        self.status_code, self.text = r.status, r.data.decode()


http = urllib3.PoolManager(timeout=60, retries=False)


def post(p, name, data, extra=None):
    fields = dict(p["fields"])
    fields.update(extra or {})
    # The fields first, then the file, as browsers send them.
    form = list(fields.items()) + [("file", (name, data))]
    return Resp(http.request("POST", p["url"], fields=form, encode_multipart=True, redirect=False))


s3 = client(sk)
data = b"uploaded from a form\n" * 100
cond = [["content-length-range", 1, 1 << 20], ["starts-with", "$Content-Type", "text/"],
        {"success_action_status": "201"}]
p = s3.generate_presigned_post(bucket, sig + "/up/${filename}", Fields={"Content-Type": "text/plain",
                               "success_action_status": "201"}, Conditions=cond, ExpiresIn=600)
r = post(p, "form.txt", data)
check(r.status_code == 201, "post: %d %s" % (r.status_code, r.text))
check("<Key>%s/up/form.txt</Key>" % sig in r.text, "PostResponse key: " + r.text)
head = s3.head_object(Bucket=bucket, Key=sig + "/up/form.txt")
check(head["ETag"].strip('"').lower() == hashlib.md5(data).hexdigest(), "etag %s" % head["ETag"])
check(head["ContentType"] == "text/plain", "content type %s" % head["ContentType"])
got = s3.get_object(Bucket=bucket, Key=sig + "/up/form.txt")["Body"].read()
check(got == data, "get after post")

# Plain policy (no extra conditions): 204 and the object.
p = s3.generate_presigned_post(bucket, sig + "/plain", ExpiresIn=600)
r = post(p, "x", b"plain")
check(r.status_code == 204, "plain post: %d %s" % (r.status_code, r.text))

# Too large for content-length-range.
p = s3.generate_presigned_post(bucket, sig + "/big", Conditions=[["content-length-range", 1, 10]], ExpiresIn=600)
r = post(p, "x", b"x" * 11)
check(r.status_code == 400 and "EntityTooLarge" in r.text, "too large: %d %s" % (r.status_code, r.text))

# A key outside the signed one, a field the policy does not name, a
# forged signature, an expired policy: all refused.
p = s3.generate_presigned_post(bucket, sig + "/fixed", ExpiresIn=600)
r = post(p, "x", b"x", {"key": sig + "/other"})
check(r.status_code == 403 and "AccessDenied" in r.text, "other key: %d %s" % (r.status_code, r.text))
r = post(p, "x", b"x", {"x-amz-meta-sneaky": "1"})
check(r.status_code == 403 and "Extra input fields" in r.text, "extra field: %d %s" % (r.status_code, r.text))
forged = client("not-the-secret").generate_presigned_post(bucket, sig + "/forged", ExpiresIn=600)
r = post(forged, "x", b"x")
check(r.status_code == 403 and "SignatureDoesNotMatch" in r.text, "forged: %d %s" % (r.status_code, r.text))
old = s3.generate_presigned_post(bucket, sig + "/expired", ExpiresIn=-60)
r = post(old, "x", b"x")
check(r.status_code == 403 and "Policy expired" in r.text, "expired: %d %s" % (r.status_code, r.text))
print("boto3 %s post ok" % sig)
