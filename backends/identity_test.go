package backends

import "testing"

// TestAliyunRegion: every endpoint form of one Alibaba Cloud region gives
// that region; other endpoints give none.
func TestAliyunRegion(t *testing.T) {
	for _, tc := range []struct {
		endpoint, region string
		ok               bool
	}{
		{"oss-cn-hangzhou.aliyuncs.com", "cn-hangzhou", true},
		{"oss-cn-hangzhou-internal.aliyuncs.com", "cn-hangzhou", true},
		{"OSS-CN-Hangzhou-Internal.aliyuncs.com.", "cn-hangzhou", true},
		{"oss-cn-hangzhou.aliyuncs.com:443", "cn-hangzhou", true},
		{"vpc100-oss-cn-hangzhou.aliyuncs.com", "cn-hangzhou", true},
		{"cn-hangzhou.oss.aliyuncs.com", "cn-hangzhou", true},
		{"oss-cn-hangzhou-finance-1-internal.aliyuncs.com", "cn-hangzhou-finance-1", true},
		{"oss-ap-southeast-1.aliyuncs.com", "ap-southeast-1", true},
		{"oss-accelerate.aliyuncs.com", "accelerate", true},
		{"oss-accelerate-overseas.aliyuncs.com", "accelerate", true},
		{"127.0.0.1:9000", "", false},
		{"oss.example.com", "", false},
		{"oss-cn-hangzhou.aliyuncs.com.evil.example", "", false},
	} {
		region, ok := AliyunRegion(tc.endpoint)
		if region != tc.region || ok != tc.ok {
			t.Errorf("AliyunRegion(%q) = %q, %v; want %q, %v", tc.endpoint, region, ok, tc.region, tc.ok)
		}
	}
}

// TestSameStore is the normalisation table of data identities: the names
// of one store count as one, names of different stores never do.
func TestSameStore(t *testing.T) {
	id := IdentityOfID
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		// OSS on Alibaba Cloud: region, bucket, prefix.
		{id("oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"), id("oss://bkt.oss-cn-hangzhou-internal.aliyuncs.com/out/"), true},
		{id("oss://bkt.oss-cn-hangzhou-internal.aliyuncs.com/out/"), id("oss://bkt.cn-hangzhou.oss.aliyuncs.com/out/"), true},
		{id("oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"), id("oss://bkt.vpc100-oss-cn-hangzhou.aliyuncs.com/out/"), true},
		{id("oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"), id("oss://bkt.oss-accelerate.aliyuncs.com/out/"), true},
		{id("oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"), id("oss://bkt.oss-cn-shanghai.aliyuncs.com/out/"), false},
		{id("oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"), id("oss://bkt.oss-cn-hangzhou.aliyuncs.com/other/"), false},
		{id("oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"), id("oss://bkt2.oss-cn-hangzhou.aliyuncs.com/out/"), false},
		// OSS elsewhere: the endpoint as given.
		{id("oss://bkt.127.0.0.1:9000/out/"), id("oss://bkt.127.0.0.1:9000/out/"), true},
		{id("oss://bkt.minio.example:9000/out/"), id("oss://bkt.MINIO.example:9000/out/"), true},
		{id("oss://bkt.127.0.0.1:9000/out/"), id("oss://bkt.127.0.0.1:9001/out/"), false},
		{id("oss://bkt.127.0.0.1:9000/out/"), id("oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"), false},
		// An identity an earlier version wrote (no endpoint) matches as it did.
		{"oss://bkt/out/", id("oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"), true},
		{"oss://bkt/out/", id("oss://bkt.127.0.0.1:9000/out/"), true},
		{"oss://bkt/out/", id("oss://bkt.127.0.0.1:9000/other/"), false},
		// HDFS: path and one shared name.
		{id("hdfs://nn1:8020,nn2:8020/out/"), id("hdfs://nn2:9000,nn1:9000/out/"), true},
		{id("hdfs://nn1:8020,nn2:8020/out/"), id("hdfs://nn2:8020/out/"), true},
		{id("hdfs://NN1.example.:8020/out/"), id("hdfs://nn1.example/out/"), true},
		{HDFSIdentity([]string{"openpai", "nn1:8020", "nn2:8020"}, "/out/"), id("hdfs://nn1:8020/out/"), true},
		{HDFSIdentity([]string{"openpai", "nn1:8020", "nn2:8020"}, "/out/"), id("hdfs://openpai/out/"), true},
		{HDFSIdentity([]string{"10.0.0.1:8020", "10.0.0.1"}, "/out/"), HDFSIdentity([]string{"nn1:8020", "10.0.0.1"}, "/out/"), true},
		{id("hdfs://nn1:8020/out/"), id("hdfs://nn3:8020/out/"), false},
		{id("hdfs://nn1:8020/out/"), id("hdfs://nn1:8020/other/"), false},
		{id("hdfs://nn1:8020/out/"), id("hdfs://nn1:8020/out/sub/"), false},
		// Different kinds of store.
		{id("hdfs://bkt/out/"), id("oss://bkt.oss-cn-hangzhou.aliyuncs.com/out/"), false},
		{id("nas:///mnt/out/"), id("nas:///mnt/out/"), true},
		{id("nas:///mnt/out/"), id("nas:///mnt/other/"), false},
	} {
		if got := SameStore(tc.a, tc.b); got != tc.same {
			t.Errorf("SameStore(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
		if got := SameStore(tc.b, tc.a); got != tc.same {
			t.Errorf("SameStore(%q, %q) = %v, want %v (not symmetric)", tc.b, tc.a, got, tc.same)
		}
	}
}

type identifiedBackend struct{ Backend }

func (identifiedBackend) ID() string     { return "hdfs://nn1:8020/out/" }
func (identifiedBackend) DataID() string { return "hdfs://nn1,nn2,openpai/out/" }

type decorator struct{ Backend }

func (d decorator) Unwrap() Backend { return d.Backend }

// TestDataIdentityThroughDecorator: a decorator (the node daemon counts
// every call through one) does not hide the backend's own identity.
func TestDataIdentityThroughDecorator(t *testing.T) {
	b := identifiedBackend{}
	if got := DataIdentity(decorator{b}); got != b.DataID() {
		t.Errorf("DataIdentity through a decorator = %q, want %q", got, b.DataID())
	}
}
