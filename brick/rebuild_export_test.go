package brick

// CollectShardOrphans runs one sweep of orphaned shards now (shardorphans.go).
func (s *Server) CollectShardOrphans() { s.collectShardOrphans() }
