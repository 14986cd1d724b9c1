// Runs Sarama (github.com/Shopify/sarama 1.22, Debian's golang-github-shopify-sarama-dev)
// against one bootstrap address. It reads one JSON run a line on standard input and writes
// one JSON object a line on standard output, so a test module starts it once:
//
//	{"bootstrap": "127.0.0.1:9092", "version": "1.0.0", "steps": [{"op": "createTopic", ...}]}
//
// "version" is Sarama's Config.Version (a Kafka version): Sarama 1.22 never asks the broker
// which versions it takes, it picks each request's version from this. The answer holds each
// step's result or error and every address Sarama opened a socket to.
//
// The ops: Sarama's own producer, consumer and ClusterAdmin calls, as an application makes
// them, and "raw": one request of a given API and version, written by Sarama's encoder and
// sent on a connection of its own, with what Sarama decoded from the answer.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

type step map[string]interface{}

type run struct {
	Bootstrap string `json:"bootstrap"`
	Version   string `json:"version"`
	Steps     []step `json:"steps"`
}

type outcome struct {
	Op     string      `json:"op"`
	OK     bool        `json:"ok"`
	Result interface{} `json:"result,omitempty"`
	Error  *failure    `json:"error,omitempty"`
}

// failure is an error as an application sees it: Sarama's text, and the Kafka error code and
// the answer's message where Sarama kept them.
type failure struct {
	Text    string  `json:"text"`
	Code    *int    `json:"code,omitempty"`
	Message *string `json:"message,omitempty"`
}

// recorder is a proxy.Dialer that notes every address Sarama dials.
type recorder struct {
	mu        sync.Mutex
	addresses []string
}

func (r *recorder) Dial(network, address string) (net.Conn, error) {
	r.mu.Lock()
	r.addresses = append(r.addresses, address)
	r.mu.Unlock()
	return (&net.Dialer{Timeout: 5 * time.Second}).Dial(network, address)
}

func describe(err error) *failure {
	f := &failure{Text: err.Error()}
	code := func(k sarama.KError) { c := int(k); f.Code = &c }
	var kerr sarama.KError
	var topicErr *sarama.TopicError
	var partitionsErr *sarama.TopicPartitionError
	var producerErrs sarama.ProducerErrors
	switch {
	case errors.As(err, &kerr):
		code(kerr)
	case errors.As(err, &topicErr):
		code(topicErr.Err)
		f.Message = topicErr.ErrMsg
	case errors.As(err, &partitionsErr):
		code(partitionsErr.Err)
		f.Message = partitionsErr.ErrMsg
	case errors.As(err, &producerErrs) && len(producerErrs) > 0:
		if errors.As(producerErrs[0].Err, &kerr) {
			code(kerr)
		}
	}
	return f
}

func (s step) str(key string) string {
	v, _ := s[key].(string)
	return v
}

func (s step) num(key string, fallback int) int {
	if v, ok := s[key].(float64); ok {
		return int(v)
	}
	return fallback
}

func (s step) flag(key string) bool {
	v, _ := s[key].(bool)
	return v
}

func (s step) strings(key string) []string {
	var out []string
	if values, ok := s[key].([]interface{}); ok {
		for _, v := range values {
			out = append(out, fmt.Sprint(v))
		}
	}
	return out
}

func (s step) configs(key string) map[string]*string {
	out := map[string]*string{}
	if values, ok := s[key].(map[string]interface{}); ok {
		for k, v := range values {
			text := fmt.Sprint(v)
			out[k] = &text
		}
	}
	return out
}

var codecs = map[string]sarama.CompressionCodec{
	"":       sarama.CompressionNone,
	"none":   sarama.CompressionNone,
	"gzip":   sarama.CompressionGZIP,
	"snappy": sarama.CompressionSnappy,
	"lz4":    sarama.CompressionLZ4,
	"zstd":   sarama.CompressionZSTD,
}

type session struct {
	bootstrap []string
	version   sarama.KafkaVersion
	dialer    *recorder
}

func (s *session) config() *sarama.Config {
	conf := sarama.NewConfig()
	conf.ClientID = "kpg-sarama-test"
	conf.Version = s.version
	conf.Net.DialTimeout = 5 * time.Second
	conf.Net.ReadTimeout = 15 * time.Second
	conf.Net.WriteTimeout = 15 * time.Second
	conf.Net.Proxy.Enable = true
	conf.Net.Proxy.Dialer = s.dialer
	conf.Admin.Timeout = 10 * time.Second
	conf.Metadata.Retry.Backoff = 100 * time.Millisecond
	conf.Producer.Return.Successes = true
	conf.Producer.RequiredAcks = sarama.WaitForAll
	conf.Consumer.Return.Errors = true
	conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	conf.Consumer.MaxWaitTime = 100 * time.Millisecond
	return conf
}

func (s *session) admin(action func(sarama.ClusterAdmin) (interface{}, error)) (interface{}, error) {
	admin, err := sarama.NewClusterAdmin(s.bootstrap, s.config())
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	return action(admin)
}

func (s *session) produce(st step) (interface{}, error) {
	conf := s.config()
	conf.Producer.Compression = codecs[st.str("compression")]
	conf.Producer.Retry.Max = st.num("retries", conf.Producer.Retry.Max)
	if st.flag("idempotent") { // Sarama's requirements for it
		conf.Producer.Idempotent = true
		conf.Net.MaxOpenRequests = 1
	}
	producer, err := sarama.NewSyncProducer(s.bootstrap, conf)
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	var headers []sarama.RecordHeader
	for k, v := range st.configs("headers") {
		headers = append(headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(*v)})
	}
	var messages []*sarama.ProducerMessage
	for _, value := range st.strings("values") {
		messages = append(messages, &sarama.ProducerMessage{
			Topic:     st.str("topic"),
			Partition: int32(st.num("partition", 0)),
			Value:     sarama.StringEncoder(value),
			Headers:   headers,
		})
	}
	if err := producer.SendMessages(messages); err != nil {
		return nil, err
	}
	return len(messages), nil
}

// consume reads every partition of a topic from its oldest offset with Sarama's consumer
// until "count" values have arrived.
func (s *session) consume(st step) (interface{}, error) {
	consumer, err := sarama.NewConsumer(s.bootstrap, s.config())
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	topic := st.str("topic")
	partitions, err := consumer.Partitions(topic)
	if err != nil {
		return nil, err
	}
	values := make(chan string)
	failures := make(chan error, len(partitions))
	for _, p := range partitions {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		defer pc.Close()
		go func(pc sarama.PartitionConsumer) {
			for {
				select {
				case m, ok := <-pc.Messages():
					if !ok {
						return
					}
					values <- string(m.Value)
				case e, ok := <-pc.Errors():
					if ok {
						failures <- e
					}
					return
				}
			}
		}(pc)
	}
	var got []string
	deadline := time.After(time.Duration(st.num("timeoutMs", 20000)) * time.Millisecond)
	for len(got) < st.num("count", 0) {
		select {
		case v := <-values:
			got = append(got, v)
		case e := <-failures:
			return got, e
		case <-deadline:
			return got, fmt.Errorf("consumed %d of %d", len(got), st.num("count", 0))
		}
	}
	sort.Strings(got)
	return got, nil
}

func (s *session) createTopic(admin sarama.ClusterAdmin, st step) (interface{}, error) {
	detail := &sarama.TopicDetail{
		NumPartitions:     int32(st.num("partitions", -1)),
		ReplicationFactor: int16(st.num("replicationFactor", 1)),
		ConfigEntries:     st.configs("configs"),
	}
	return true, admin.CreateTopic(st.str("topic"), detail, st.flag("validateOnly"))
}

func topicNames(admin sarama.ClusterAdmin) (interface{}, error) {
	topics, err := admin.ListTopics()
	names := []string{}
	for name := range topics {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, err
}

func describeTopics(admin sarama.ClusterAdmin, st step) (interface{}, error) {
	metadata, err := admin.DescribeTopics(st.strings("topics"))
	codes := map[string]int{}
	for _, t := range metadata {
		codes[t.Name] = int(t.Err)
	}
	return codes, err
}

func describeConfig(admin sarama.ClusterAdmin, st step) (interface{}, error) {
	entries, err := admin.DescribeConfig(sarama.ConfigResource{
		Type: sarama.TopicResource,
		Name: st.str("topic"),
	})
	values := map[string]string{}
	for _, e := range entries {
		values[e.Name] = e.Value
	}
	return values, err
}

func describeCluster(admin sarama.ClusterAdmin) (interface{}, error) {
	brokers, _, err := admin.DescribeCluster()
	var addresses []string
	for _, b := range brokers {
		addresses = append(addresses, b.Addr())
	}
	return addresses, err
}

func (s *session) adminStep(st step) (interface{}, error) {
	return s.admin(func(admin sarama.ClusterAdmin) (interface{}, error) {
		switch st.str("op") {
		case "createTopic":
			return s.createTopic(admin, st)
		case "deleteTopic":
			return true, admin.DeleteTopic(st.str("topic"))
		case "alterConfig":
			return true, admin.AlterConfig(
				sarama.TopicResource, st.str("topic"), st.configs("configs"), st.flag("validateOnly"))
		case "createPartitions":
			return true, admin.CreatePartitions(
				st.str("topic"), int32(st.num("count", 0)), nil, st.flag("validateOnly"))
		case "deleteRecords":
			return true, admin.DeleteRecords(st.str("topic"), map[int32]int64{0: int64(st.num("offset", -1))})
		case "listTopics":
			return topicNames(admin)
		case "describeTopics":
			return describeTopics(admin, st)
		case "describeConfig":
			return describeConfig(admin, st)
		case "describeCluster":
			return describeCluster(admin)
		}
		return nil, fmt.Errorf("unknown op %q", st.str("op"))
	})
}

func (s *session) do(st step) (interface{}, error) {
	switch st.str("op") {
	case "produce":
		return s.produce(st)
	case "consume":
		return s.consume(st)
	case "raw":
		return s.raw(st)
	}
	return s.adminStep(st)
}

func (s *session) execute(r run) map[string]interface{} {
	results := []outcome{}
	for _, st := range r.Steps {
		result, err := s.do(st)
		if err != nil {
			results = append(results, outcome{Op: st.str("op"), Error: describe(err), Result: result})
		} else {
			results = append(results, outcome{Op: st.str("op"), OK: true, Result: result})
		}
	}
	s.dialer.mu.Lock()
	defer s.dialer.mu.Unlock()
	return map[string]interface{}{"results": results, "connections": s.dialer.addresses}
}

func main() {
	if os.Getenv("SARAMA_LOG") != "" {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	}
	in := bufio.NewReader(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadString('\n')
		if strings.TrimSpace(line) != "" {
			var r run
			if jerr := json.Unmarshal([]byte(line), &r); jerr != nil {
				log.Fatalf("bad run: %v", jerr)
			}
			version, verr := sarama.ParseKafkaVersion(r.Version)
			if verr != nil {
				log.Fatalf("bad version: %v", verr)
			}
			s := &session{bootstrap: []string{r.Bootstrap}, version: version, dialer: &recorder{}}
			if err := out.Encode(s.execute(r)); err != nil {
				log.Fatal(err)
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			log.Fatal(err)
		}
	}
}
