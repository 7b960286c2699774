package environment

import (
	"os"
	"syscall"
)

func ownerOf(fi os.FileInfo) [2]int {
	if fi == nil {
		return [2]int{-1, -1}
	}
	st := fi.Sys().(*syscall.Stat_t)
	return [2]int{int(st.Uid), int(st.Gid)}
}
