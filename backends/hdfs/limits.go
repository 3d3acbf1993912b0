package hdfs

// The NameNode's defaults: dfs.namenode.fs-limits.max-component-length
// (255) and HdfsServerConstants.MAX_PATH_LENGTH (8000 characters).
const (
	maxComponentBytes = 255
	maxPathBytes      = 8000
)

// NameLimits implements backends.NameLimiter with the NameNode's default
// limits (a cluster configured with a lower component limit still refuses
// at upload; such a file is set aside, never retried).
func (b *backend) NameLimits() (component, key int) {
	return maxComponentBytes, maxPathBytes - len(b.root) - 1
}
