package objstore

import (
	"fmt"
	"os"
)

// CheckSecretFile refuses a file of keys that group or others may read,
// as ssh refuses such a private key; store names the store in the error
// ("OSS", "S3").
func CheckSecretFile(store, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s credentials file: %w", store, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s credentials file %s is accessible by group or others (mode %04o): run chmod 600 %s", store, path, fi.Mode().Perm(), path)
	}
	return nil
}
