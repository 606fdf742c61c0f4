package metrics_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/laboro-go/laboro"
	"github.com/laboro-go/laboro/metrics"
)

// An Executor's metrics in a registry of one's own, served at /metrics.
func Example() {
	ex, err := laboro.New()
	if err != nil {
		panic(err)
	}
	col := metrics.New()
	col.Attach(ex)
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	mux := http.NewServeMux() // or http.DefaultServeMux
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	h, _ := ex.Submit(context.Background(), laboro.Job{Command: "true"})
	res, _ := h.Wait(context.Background())
	res.Output.Close()
	ex.Shutdown(context.Background())
	fmt.Println(res.Status)
	// Output: succeeded
}
