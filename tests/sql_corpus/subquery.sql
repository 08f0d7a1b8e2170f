-- Subqueries: a projection and filter over a filtered projection; CASE with
-- an operand, IFNULL, arithmetic over computed names.
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
  bucket STRING,
  worth DECIMAL(21, 2),
  flag INT
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT user_id, bucket, worth, flag
FROM (
  SELECT user_id,
    CASE item WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE 'many' END AS bucket,
    IFNULL(price, 0.00) * IFNULL(qty, 1) AS worth,
    CASE WHEN score > 50 THEN 1 WHEN score < -50 THEN -1 ELSE 0 END AS flag
  FROM events
  WHERE item <= 5
) AS t
WHERE worth > 100 OR flag <> 0;
