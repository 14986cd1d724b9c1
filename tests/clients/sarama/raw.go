package main

// "raw": one request of one API and version, written by Sarama's own encoder and sent on a
// connection of its own to the bootstrap address; the result is what Sarama decoded from the
// answer (error codes, by topic), or the error Sarama met (a closed connection: EOF).

import (
	"fmt"
	"time"

	"github.com/Shopify/sarama"
)

func (s *session) raw(st step) (interface{}, error) {
	conf := s.config()
	conf.Version = sarama.MaxVersion // Sarama refuses to send a version newer than this
	broker := sarama.NewBroker(s.bootstrap[0])
	if err := broker.Open(conf); err != nil {
		return nil, err
	}
	defer broker.Close()
	version := int16(st.num("version", 0))
	switch st.str("api") {
	case "CreateTopics":
		return rawCreateTopics(broker, version, st)
	case "DeleteTopics":
		answer, err := broker.DeleteTopics(&sarama.DeleteTopicsRequest{
			Version: version, Topics: st.strings("topics"), Timeout: 5 * time.Second,
		})
		if err != nil {
			return nil, err
		}
		codes := map[string]int{}
		for topic, code := range answer.TopicErrorCodes {
			codes[topic] = int(code)
		}
		return codes, nil
	case "DeleteRecords":
		return rawDeleteRecords(broker, st)
	case "Metadata":
		return rawMetadata(broker, version, st)
	case "Produce":
		return rawProduce(broker, version, st)
	case "AlterConfigs":
		return rawAlterConfigs(broker, st)
	case "CreatePartitions":
		return rawCreatePartitions(broker, st)
	case "Fetch":
		return rawFetch(broker, version, st)
	case "ListOffsets":
		return rawListOffsets(broker, version, st)
	case "DescribeConfigs":
		return rawDescribeConfigs(broker, version, st)
	case "OffsetCommit":
		return rawOffsetCommit(broker, version, st)
	case "CreateAcls":
		return rawCreateAcls(broker, version, st)
	case "DeleteAcls":
		return rawDeleteAcls(broker, version, st)
	}
	return nil, fmt.Errorf("no raw %q", st.str("api"))
}

type topicAnswer struct {
	Code    int     `json:"code"`
	Message *string `json:"message"`
}

func rawCreateTopics(broker *sarama.Broker, version int16, st step) (interface{}, error) {
	details := map[string]*sarama.TopicDetail{}
	for _, spec := range st["topics"].([]interface{}) {
		topic := step(spec.(map[string]interface{}))
		details[topic.str("name")] = &sarama.TopicDetail{
			NumPartitions:     int32(topic.num("partitions", -1)),
			ReplicationFactor: int16(topic.num("replicationFactor", 1)),
			ConfigEntries:     topic.configs("configs"),
		}
	}
	answer, err := broker.CreateTopics(&sarama.CreateTopicsRequest{
		Version:      version,
		TopicDetails: details,
		Timeout:      5 * time.Second,
		ValidateOnly: st.flag("validateOnly"),
	})
	if err != nil {
		return nil, err
	}
	topics := map[string]topicAnswer{}
	for topic, e := range answer.TopicErrors {
		topics[topic] = topicAnswer{Code: int(e.Err), Message: e.ErrMsg}
	}
	return topics, nil
}

func rawDeleteRecords(broker *sarama.Broker, st step) (interface{}, error) {
	topic := st.str("topic")
	answer, err := broker.DeleteRecords(&sarama.DeleteRecordsRequest{
		Topics: map[string]*sarama.DeleteRecordsRequestTopic{
			topic: {PartitionOffsets: map[int32]int64{0: int64(st.num("offset", -1))}},
		},
		Timeout: 5 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	codes := map[string]int{}
	for name, t := range answer.Topics {
		for _, p := range t.Partitions {
			codes[name] = int(p.Err)
		}
	}
	return codes, nil
}

func rawMetadata(broker *sarama.Broker, version int16, st step) (interface{}, error) {
	answer, err := broker.GetMetadata(&sarama.MetadataRequest{
		Version:                version,
		Topics:                 st.strings("topics"),
		AllowAutoTopicCreation: st.flag("allowAutoTopicCreation"),
	})
	if err != nil {
		return nil, err
	}
	codes := map[string]int{}
	for _, t := range answer.Topics {
		codes[t.Name] = int(t.Err)
	}
	return codes, nil
}

// rawProduce writes one record without headers: v0-v2 as an uncompressed legacy message set
// (magic 0 for v0 and v1, 1 for v2; Sarama's producer compresses those itself), v3 and later as a record batch (Sarama writes the v3 body for every
// later version: v4-v7 add nothing to the request).
func rawProduce(broker *sarama.Broker, version int16, st step) (interface{}, error) {
	request := &sarama.ProduceRequest{
		Version:      version,
		RequiredAcks: sarama.WaitForAll,
		Timeout:      5000,
	}
	topic, value := st.str("topic"), []byte(st.str("value"))
	codec := codecs[st.str("compression")]
	if version < 3 {
		magic := int8(0)
		if version == 2 {
			magic = 1
		}
		message := &sarama.Message{Value: value, Version: magic}
		request.AddMessage(topic, 0, message)
	} else {
		request.AddBatch(topic, 0, &sarama.RecordBatch{
			Version:        2,
			Codec:          codec,
			ProducerID:     -1,
			ProducerEpoch:  -1,
			FirstSequence:  -1,
			FirstTimestamp: time.Now(),
			MaxTimestamp:   time.Now(),
			Records:        []*sarama.Record{{Value: value}},
		})
	}
	answer, err := broker.Produce(request)
	if err != nil {
		return nil, err
	}
	codes := map[string]int{}
	for name, partitions := range answer.Blocks {
		for _, block := range partitions {
			codes[name] = int(block.Err)
		}
	}
	return codes, nil
}

func rawAlterConfigs(broker *sarama.Broker, st step) (interface{}, error) {
	answer, err := broker.AlterConfigs(&sarama.AlterConfigsRequest{
		Resources: []*sarama.AlterConfigsResource{{
			Type: sarama.TopicResource, Name: st.str("topic"), ConfigEntries: st.configs("configs"),
		}},
		ValidateOnly: st.flag("validateOnly"),
	})
	if err != nil {
		return nil, err
	}
	topics := map[string]topicAnswer{}
	for _, r := range answer.Resources {
		message := r.ErrorMsg
		topics[r.Name] = topicAnswer{Code: int(r.ErrorCode), Message: &message}
	}
	return topics, nil
}

func rawCreatePartitions(broker *sarama.Broker, st step) (interface{}, error) {
	answer, err := broker.CreatePartitions(&sarama.CreatePartitionsRequest{
		TopicPartitions: map[string]*sarama.TopicPartition{
			st.str("topic"): {Count: int32(st.num("count", 0))},
		},
		Timeout:      5 * time.Second,
		ValidateOnly: st.flag("validateOnly"),
	})
	if err != nil {
		return nil, err
	}
	topics := map[string]topicAnswer{}
	for name, e := range answer.TopicPartitionErrors {
		topics[name] = topicAnswer{Code: int(e.Err), Message: e.ErrMsg}
	}
	return topics, nil
}

// rawFetch reads partition 0 of a topic from offset 0: its error code and how many values came.
func rawFetch(broker *sarama.Broker, version int16, st step) (interface{}, error) {
	request := &sarama.FetchRequest{Version: version, MaxWaitTime: 100, MinBytes: 1, MaxBytes: 1 << 20}
	topic := st.str("topic")
	request.AddBlock(topic, 0, 0, 1<<20)
	answer, err := broker.Fetch(request)
	if err != nil {
		return nil, err
	}
	block := answer.GetBlock(topic, 0)
	if block == nil {
		return nil, fmt.Errorf("no partition 0 of %s in the answer", topic)
	}
	values := 0
	for _, records := range block.RecordsSet {
		if records.MsgSet != nil {
			values += len(records.MsgSet.Messages)
		}
		if records.RecordBatch != nil {
			values += len(records.RecordBatch.Records)
		}
	}
	return map[string]int{"code": int(block.Err), "records": values}, nil
}

// rawListOffsets asks for partition 0's latest offset: its error code.
func rawListOffsets(broker *sarama.Broker, version int16, st step) (interface{}, error) {
	request := &sarama.OffsetRequest{Version: version}
	topic := st.str("topic")
	request.AddBlock(topic, 0, sarama.OffsetNewest, 1)
	answer, err := broker.GetAvailableOffsets(request)
	if err != nil {
		return nil, err
	}
	block := answer.GetBlock(topic, 0)
	if block == nil {
		return nil, fmt.Errorf("no partition 0 of %s in the answer", topic)
	}
	return map[string]int{topic: int(block.Err)}, nil
}

// rawDescribeConfigs describes a topic: its configs by name, or its error code.
func rawDescribeConfigs(broker *sarama.Broker, version int16, st step) (interface{}, error) {
	answer, err := broker.DescribeConfigs(&sarama.DescribeConfigsRequest{
		Version:   version,
		Resources: []*sarama.ConfigResource{{Type: sarama.TopicResource, Name: st.str("topic")}},
	})
	if err != nil {
		return nil, err
	}
	configs := map[string]interface{}{}
	for _, r := range answer.Resources {
		if r.ErrorCode != 0 {
			return map[string]int{r.Name: int(r.ErrorCode)}, nil
		}
		for _, c := range r.Configs {
			configs[c.Name] = c.Value
		}
	}
	return configs, nil
}

// rawCreateAcls asks for one binding: DENY READ on a topic (a literal name) to User:*.
func rawCreateAcls(broker *sarama.Broker, version int16, st step) (interface{}, error) {
	answer, err := broker.CreateAcls(&sarama.CreateAclsRequest{
		Version: version,
		AclCreations: []*sarama.AclCreation{{
			Resource: sarama.Resource{
				ResourceType:       sarama.AclResourceTopic,
				ResourceName:       st.str("topic"),
				ResoucePatternType: sarama.AclPatternLiteral,
			},
			Acl: sarama.Acl{
				Principal:      "User:*",
				Host:           "*",
				Operation:      sarama.AclOperationRead,
				PermissionType: sarama.AclPermissionDeny,
			},
		}},
	})
	if err != nil {
		return nil, err
	}
	codes := map[string]int{}
	for _, r := range answer.AclCreationResponses {
		codes[st.str("topic")] = int(r.Err)
	}
	return codes, nil
}

// rawDeleteAcls deletes every binding on a topic (a literal name).
func rawDeleteAcls(broker *sarama.Broker, version int16, st step) (interface{}, error) {
	topic := st.str("topic")
	answer, err := broker.DeleteAcls(&sarama.DeleteAclsRequest{
		Version: int(version),
		Filters: []*sarama.AclFilter{{
			Version:                   int(version),
			ResourceType:              sarama.AclResourceTopic,
			ResourceName:              &topic,
			ResourcePatternTypeFilter: sarama.AclPatternLiteral,
			Operation:                 sarama.AclOperationAny,
			PermissionType:            sarama.AclPermissionAny,
		}},
	})
	if err != nil {
		return nil, err
	}
	codes := map[string]int{}
	for _, r := range answer.FilterResponses {
		codes[topic] = int(r.Err)
	}
	return codes, nil
}

// rawOffsetCommit commits an offset of partition 0 for a group with no members (generation
// -1, as a tool resetting offsets does), then reads it back with OffsetFetch v1: the commit's
// error code and the offset the group then has.
func rawOffsetCommit(broker *sarama.Broker, version int16, st step) (interface{}, error) {
	group, topic := st.str("groupId"), st.str("topic")
	request := &sarama.OffsetCommitRequest{
		Version:                 version,
		ConsumerGroup:           group,
		ConsumerGroupGeneration: -1,
		RetentionTime:           int64(st.num("retentionMs", -1)),
	}
	request.AddBlock(topic, 0, int64(st.num("offset", 0)), time.Now().UnixNano()/1e6, "")
	answer, err := broker.CommitOffset(request)
	if err != nil {
		return nil, err
	}
	fetch := &sarama.OffsetFetchRequest{Version: 1, ConsumerGroup: group}
	fetch.AddPartition(topic, 0)
	fetched, err := broker.FetchOffset(fetch)
	if err != nil {
		return nil, err
	}
	block := fetched.GetBlock(topic, 0)
	if block == nil {
		return nil, fmt.Errorf("no partition 0 of %s in the OffsetFetch answer", topic)
	}
	return map[string]int64{
		"code":      int64(answer.Errors[topic][0]),
		"committed": block.Offset,
	}, nil
}
