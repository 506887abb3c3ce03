// Command clientgo-writer is the client-go reference writer of bench/write_bench.py: it server-side
// applies the same objects our Python clients write (NodeFeatures, or one label on each Node), with
// a fixed number of requests in flight and client-go's rate limiter off (QPS and burst unlimited), and
// prints one JSON line: writes, seconds, writes/s and its own CPU time per write (getrusage of this
// process over the writes alone, start-up excluded).
//
// The bodies are built here, not read from a file, in exactly the form bench/write_bench.py builds them
// (write_bench.nodefeature_body / node_label_body), so every client sends the same bytes' worth of
// object: a NodeFeature named NAME in NAMESPACE with the nfd node-name label and one spec label
// whose value is VALUE (a new value per pass, so every apply is a real write).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	nodeFeatures = schema.GroupVersionResource{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Resource: "nodefeatures"}
	nodes        = schema.GroupVersionResource{Group: "", Version: "v1", Resource: "nodes"}
)

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	kind := flag.String("kind", "nodefeature", "what to apply: nodefeature | nodelabel | label (one label on cluster-scoped objects of -gvr)")
	gvr := flag.String("gvr", "", "with -kind label: group/version/resource of the objects (\"\" group for the core API)")
	objKind := flag.String("objkind", "", "with -kind label: the objects' kind")
	names := flag.String("names", "", "file with one object name per line (the NodeFeatures' nodes, or the Nodes)")
	namespace := flag.String("namespace", "default", "the NodeFeatures' namespace")
	label := flag.String("label", "bench.gpustack.ai/write", "the label key written")
	value := flag.String("value", "1", "the label value written")
	manager := flag.String("manager", "gpustack-write-bench", "field manager")
	concurrency := flag.Int("concurrency", 8, "requests in flight")
	http1 := flag.Bool("http1", false, "HTTP/1.1 only (client-go negotiates HTTP/2 over TLS by default)")
	flag.Parse()

	raw, err := os.ReadFile(*names)
	if err != nil {
		fmt.Fprintln(os.Stderr, "names:", err)
		os.Exit(2)
	}
	var todo []string
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			todo = append(todo, line)
		}
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		os.Exit(2)
	}
	config.QPS = -1 // no client-side rate limiter
	config.Burst = 1 << 20
	config.UserAgent = "gpustack-write-bench-clientgo"
	if *http1 {
		config.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(2)
	}
	labelled, labelledKind, apiVersion := nodes, "Node", "v1"
	if *kind == "label" {
		parts := strings.Split(*gvr, "/")
		if len(parts) != 3 || *objKind == "" {
			fmt.Fprintln(os.Stderr, "-kind label needs -gvr group/version/resource and -objkind")
			os.Exit(2)
		}
		labelled = schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]}
		labelledKind, apiVersion = *objKind, labelled.GroupVersion().String()
	}
	clusterScoped := *kind == "nodelabel" || *kind == "label"
	body := func(name string) *unstructured.Unstructured {
		if clusterScoped {
			return &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": apiVersion,
				"kind":       labelledKind,
				"metadata":   map[string]any{"name": name, "labels": map[string]any{*label: *value}},
			}}
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "nfd.k8s-sigs.io/v1alpha1",
			"kind":       "NodeFeature",
			"metadata": map[string]any{
				"name":      "bench-" + name,
				"namespace": *namespace,
				"labels":    map[string]any{"nfd.node.kubernetes.io/node-name": name},
			},
			"spec": map[string]any{"labels": map[string]any{*label: *value}},
		}}
	}
	opts := metav1.ApplyOptions{FieldManager: *manager, Force: true}
	ctx := context.Background()
	var next, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	cpu0, start := cpuSeconds(), time.Now()
	for range *concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(todo)) {
					return
				}
				obj := body(todo[i])
				var err error
				if clusterScoped {
					_, err = client.Resource(labelled).Apply(ctx, obj.GetName(), obj, opts)
				} else {
					_, err = client.Resource(nodeFeatures).Namespace(*namespace).Apply(ctx, obj.GetName(), obj, opts)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	seconds, cpu := time.Since(start).Seconds(), cpuSeconds()-cpu0
	writes := len(todo)
	out := map[string]any{
		"writes":           writes,
		"failed":           failed.Load(),
		"seconds":          seconds,
		"writes_per_s":     float64(writes) / seconds,
		"cpu_s":            cpu,
		"cpu_ms_per_write": cpu / float64(writes) * 1e3,
		"concurrency":      *concurrency,
		"http1":            *http1,
	}
	if e := firstErr.Load(); e != nil {
		out["first_error"] = e
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
	if failed.Load() > 0 {
		os.Exit(1)
	}
}
