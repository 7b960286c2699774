package local

import "github.com/code-sandboxes/code-sandboxes/internal/records"

// The allocation's record and range, as records writes them.
const uidFile = "hostuid"

var uidBase = records.LocalUIDs.Base
