"""RocksDB's own write statistics from its LOG, shared by the RocksDB benchmark scripts.

db_bench with --statistics=1 --stats_dump_period_sec=1 writes its cumulative statistics to the
database's LOG every second, each dump under a timestamped "STATISTICS:" line.
"""
import datetime
import re


def write_dumps(log_path):
    """(unix time, COUNT, SUM µs) of rocksdb.db.write.micros at each dump, cumulative."""
    dumps, at = [], None
    for line in open(log_path):
        if "STATISTICS:" in line:
            stamp = line.split()[0]
            at = datetime.datetime.strptime(stamp, "%Y/%m/%d-%H:%M:%S.%f").timestamp()
        m = re.match(r"rocksdb\.db\.write\.micros .* COUNT : (\d+) SUM : (\d+)", line)
        if m and at is not None:
            dumps.append((at, int(m[1]), int(m[2])))
            at = None
    return dumps
