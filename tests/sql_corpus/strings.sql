-- String functions over a column with NULLs, empty and padded strings, commas
-- and quotes: the results as Flink's csv format quotes them.
CREATE TABLE events (
  user_id STRING,
  item INT,
  qty INT,
  price DECIMAL(10, 2),
  score DOUBLE,
  tag STRING,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${INPUT}/events.csv',
  'format' = 'csv',
  'csv.null-literal' = 'NULL',
  'scan.watermark.emit.strategy' = 'on-event'
);

CREATE TABLE results (
  user_id STRING,
  up STRING,
  low STRING,
  joined STRING,
  piped STRING,
  part STRING,
  len INT,
  trimmed STRING,
  ltrimmed STRING,
  rtrimmed STRING,
  fallback STRING,
  has_e BOOLEAN,
  kind STRING
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT user_id, UPPER(tag), LOWER(tag), CONCAT(user_id, '-', tag),
  user_id || ':' || CAST(item AS STRING), SUBSTRING(tag FROM 2 FOR 3), CHAR_LENGTH(tag),
  TRIM(tag), TRIM(LEADING ' ' FROM tag), TRIM(TRAILING ' ' FROM tag), COALESCE(tag, 'none'),
  tag LIKE '%e%',
  CASE WHEN tag IS NULL THEN 'null' WHEN CHAR_LENGTH(TRIM(tag)) = 0 THEN 'blank'
       WHEN UPPER(tag) = tag THEN 'upper' ELSE 'other' END
FROM events
WHERE item BETWEEN 3 AND 9;
