package oss

// maxKeyBytes is OSS's limit on an object name.
const maxKeyBytes = 1023

// NameLimits implements backends.NameLimiter: object names of at most
// 1023 bytes, the channel's prefix included; no per-component limit.
func (b *Backend) NameLimits() (component, key int) {
	return 0, maxKeyBytes - len(b.prefix)
}
