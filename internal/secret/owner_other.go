//go:build !unix

package secret

import "io/fs"

func ownedByMe(fs.FileInfo) bool { return true }
