package sandboxes

import "github.com/code-sandboxes/code-sandboxes/internal/driver"

func init() {
	driver.InstanceOf = func(x any) driver.Instance {
		if s, ok := x.(*Sandbox); ok && s != nil {
			return s.inst
		}
		return nil
	}
}
