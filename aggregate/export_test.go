package aggregate

// BufferedRecords is how many records the client's producer holds, not
// yet acknowledged by Kafka.
func (c *Client[C]) BufferedRecords() int64 { return c.prod.BufferedProduceRecords() }

var KafkaAway = kafkaAway
