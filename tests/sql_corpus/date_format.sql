-- DATE_FORMAT of a TIMESTAMP (java.time's pattern letters) and of a STRING
-- (read as yyyy-MM-dd HH:mm:ss, written with SimpleDateFormat's letters):
-- dates over many years, months and weekdays, hours around midnight and
-- noon, quoted literals, a pattern chosen per row, strings that do not read.
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

CREATE TEMPORARY VIEW dated AS
SELECT item, qty, tag, ts,
  TO_TIMESTAMP(CAST(1990 + MOD(item, 40) AS STRING) || '-0' || CAST(MOD(item, 9) + 1 AS STRING)
    || '-1' || CAST(MOD(ABS(qty), 10) AS STRING) || ' ' || CAST(10 + MOD(item, 14) AS STRING)
    || ':3' || CAST(MOD(item, 10) AS STRING) || ':0' || CAST(MOD(ABS(qty), 10) AS STRING)) AS d
FROM events
WHERE MOD(item, 4) = 0;

CREATE TABLE results (
  item INT,
  f_plain STRING,
  f_iso STRING,
  f_short STRING,
  f_words STRING,
  f_days STRING,
  f_quarters STRING,
  f_hours STRING,
  f_quoted STRING,
  f_midnight STRING,
  f_per_row STRING,
  f_from_string STRING,
  f_string_words STRING,
  f_string_days STRING,
  f_from_tag STRING
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT item,
  DATE_FORMAT(d, 'yyyy-MM-dd HH:mm:ss'),
  DATE_FORMAT(ts, 'yyyy-MM-dd''T''HH:mm:ss.SSS'),
  DATE_FORMAT(d, 'yy/M/d H:m:s.S'),
  DATE_FORMAT(d, 'EEE, d MMM yyyy hh:mm a G'),
  DATE_FORMAT(d, 'EEEE MMMM D DDD u'),
  DATE_FORMAT(d, 'Q QQ QQQ QQQQ'),
  DATE_FORMAT(d, 'k K h a'),
  DATE_FORMAT(d, '''at'' HH ''o''''clock'' [mm]'),
  DATE_FORMAT(ts, 'h:mm:ss.SS a k K A'),
  DATE_FORMAT(d, CASE WHEN MOD(item, 8) = 0 THEN 'yyyyMMdd' ELSE 'dd.MM.yy' END),
  DATE_FORMAT(CAST(ts AS STRING), 'yyyyMMdd HH:mm:ss.SSS'),
  DATE_FORMAT(CAST(d AS STRING), 'EEEE, MMMM d, y h a z Z X'),
  DATE_FORMAT(CAST(d AS STRING), 'D u k K yy-M-d E MMM'),
  DATE_FORMAT(tag, 'yyyy')
FROM dated;
