package dev.oxbow.bench;

import java.util.Map;

import org.apache.kafka.streams.state.RocksDBConfigSetter;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.Cache;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;
import org.rocksdb.RocksDB;
import org.rocksdb.WriteBufferManager;

/**
 * Bounds the memory of every RocksDB store of the process, as Kafka Streams'
 * memory-management guide does: one LRU block cache shared by all stores (and
 * all segments of the window stores), index and filter blocks kept in it (at
 * high priority, the top-level index pinned) rather than on the heap beside it,
 * and a write-buffer manager that charges every memtable to the same cache. The
 * process's RocksDB memory is then at most the cache's capacity, whatever the
 * number of stores; each store's memtable size and count stay Kafka Streams'
 * (16 MiB, at most 3).
 *
 * <p>{@link #bound} sets the sizes before the client starts; Kafka Streams
 * instantiates this class once per store.
 */
public final class BoundedRocksDB implements RocksDBConfigSetter {

    /** The share of the cache kept for index and filter blocks. */
    static final double HIGH_PRIORITY_POOL_RATIO = 0.1;

    private static Cache cache;
    private static WriteBufferManager writeBuffers;

    /** Shares a cache of {@code totalBytes}, {@code memtableBytes} of it for memtables. */
    static synchronized void bound(long totalBytes, long memtableBytes) {
        RocksDB.loadLibrary();
        cache = new LRUCache(totalBytes, -1, false, HIGH_PRIORITY_POOL_RATIO);
        writeBuffers = new WriteBufferManager(memtableBytes, cache);
    }

    private static synchronized Cache cache() {
        if (cache == null) {
            throw new IllegalStateException("BoundedRocksDB.bound was not called");
        }
        return cache;
    }

    private static synchronized WriteBufferManager writeBuffers() {
        return writeBuffers;
    }

    @Override
    public void setConfig(String storeName, Options options, Map<String, Object> configs) {
        BlockBasedTableConfig table = (BlockBasedTableConfig) options.tableFormatConfig();
        table.setBlockCache(cache());
        table.setCacheIndexAndFilterBlocks(true);
        table.setCacheIndexAndFilterBlocksWithHighPriority(true);
        table.setPinTopLevelIndexAndFilter(true);
        options.setWriteBufferManager(writeBuffers());
        options.setTableFormatConfig(table);
    }

    @Override
    public void close(String storeName, Options options) {
        // The cache and the write-buffer manager are shared by every store:
        // closing a store must not close them.
    }
}
