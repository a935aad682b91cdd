package hanging_test

import (
	"testing"

	"go.uber.org/goleak"
)

// No goroutine a test started outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
