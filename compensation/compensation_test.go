package compensation_test

import (
	"fmt"

	"github.com/agentsaga/agentsaga/compensation"
)

func ExampleKey() {
	key := compensation.Key("run-42/step-002-call-1-charge")
	forward, ok := compensation.ForwardKey(key)
	fmt.Println(key)
	fmt.Println(forward, ok)
	// Output:
	// run-42/step-002-call-1-charge/compensate
	// run-42/step-002-call-1-charge true
}
