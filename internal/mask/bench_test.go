package mask_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/taskgraph/taskgraph/internal/mask"
)

// What a createTask masks: its input, title and biz id (engine.prepare).
var (
	benchInput = json.RawMessage(`{"url":"https://hooks.example.com/notify?token=abc123&page=2","method":"POST",` +
		`"headers":{"Content-Type":"application/json","X-Request-Id":"7f1c2a9e-4b1d-4c55-9a0e-2f6d8b3c1e77"},` +
		`"body":{"orderId":"ORD-2026112912345","customer":{"name":"张三","phone":"13812345678","email":"zhangsan@example.com","city":"上海"},` +
		`"items":[{"sku":"SKU-001","qty":2,"price":19.99},{"sku":"SKU-002","qty":1,"price":5.5}],"note":"deliver before 18:00, call ahead"},` +
		`"timeoutMs":5000,"retries":3}`)
	benchTitle = "notify customer about order ORD-2026112912345"
	benchBizID = "ORD-2026112912345"
)

// BenchmarkCreateTask is the masking one createTask costs.
func BenchmarkCreateTask(b *testing.B) {
	m := mask.Default()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := m.JSON(benchInput); err != nil {
			b.Fatal(err)
		}
		_ = m.String(benchTitle)
		_ = m.String(benchBizID)
	}
}

// BenchmarkCleanInput is a large input with nothing to mask: the common
// case, where every string is scanned and nothing matches.
func BenchmarkCleanInput(b *testing.B) {
	fields := make([]string, 200)
	for i := range fields {
		fields[i] = fmt.Sprintf(`"field%d":"some ordinary text value number %d, nothing secret here"`, i, i)
	}
	in := json.RawMessage("{" + strings.Join(fields, ",") + "}")
	m := mask.Default()
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := m.JSON(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkString is a log line or an error message.
func BenchmarkString(b *testing.B) {
	s := "POST https://hooks.example.com/notify?token=abc123: dial tcp 10.0.0.7:443: connection refused (customer 13812345678, attempt 2 of 3)"
	m := mask.Default()
	b.ReportAllocs()
	for b.Loop() {
		_ = m.String(s)
	}
}
