-- The nexmark topic: one JSON object per event with one member, Person, Auction or Bid, holding
-- the nexmark crate's (0.2.0) fields; a member absent from a record is a NULL row. Event time:
-- the event's date_time (epoch ms), watermark 1 s behind the highest seen (the engine's
-- out_of_orderness_ms in examples/nexmark/*.py), per Kafka partition as the source tracks it.
-- Options (bench/peers/flink_nexmark_peer.py): the kafka connector, read_committed,
-- from the earliest offset, bounded at the latest offset for a backlog run.
CREATE TABLE nexmark (
  `Person` ROW<`id` BIGINT, `name` STRING, `email_address` STRING, `credit_card` STRING,
    `city` STRING, `state` STRING, `date_time` BIGINT, `extra` STRING>,
  `Auction` ROW<`id` BIGINT, `item_name` STRING, `description` STRING, `initial_bid` BIGINT,
    `reserve` BIGINT, `date_time` BIGINT, `expires` BIGINT, `seller` BIGINT, `category` BIGINT,
    `extra` STRING>,
  `Bid` ROW<`auction` BIGINT, `bidder` BIGINT, `price` BIGINT, `channel` STRING, `url` STRING,
    `date_time` BIGINT, `extra` STRING>,
  `ts` AS TO_TIMESTAMP_LTZ(COALESCE(`Person`.`date_time`, `Auction`.`date_time`,
    `Bid`.`date_time`), 3),
  WATERMARK FOR `ts` AS `ts` - INTERVAL '1' SECOND
) WITH (${source_options});

-- One view per kind: the member's fields, date_time (ms, BIGINT, for comparisons) and ts (the
-- event-time attribute, for windows).
CREATE VIEW person AS
SELECT e.`Person`.`id` AS id, e.`Person`.`name` AS name,
  e.`Person`.`email_address` AS email_address, e.`Person`.`credit_card` AS credit_card,
  e.`Person`.`city` AS city, e.`Person`.`state` AS state, e.`Person`.`date_time` AS date_time,
  e.`Person`.`extra` AS extra, e.ts AS ts
FROM nexmark AS e WHERE e.`Person` IS NOT NULL;

CREATE VIEW auction AS
SELECT e.`Auction`.`id` AS id, e.`Auction`.`item_name` AS item_name,
  e.`Auction`.`description` AS description, e.`Auction`.`initial_bid` AS initial_bid,
  e.`Auction`.`reserve` AS reserve, e.`Auction`.`date_time` AS date_time,
  e.`Auction`.`expires` AS expires, e.`Auction`.`seller` AS seller,
  e.`Auction`.`category` AS category, e.`Auction`.`extra` AS extra, e.ts AS ts
FROM nexmark AS e WHERE e.`Auction` IS NOT NULL;

CREATE VIEW bid AS
SELECT e.`Bid`.`auction` AS auction, e.`Bid`.`bidder` AS bidder, e.`Bid`.`price` AS price,
  e.`Bid`.`channel` AS channel, e.`Bid`.`url` AS url, e.`Bid`.`date_time` AS date_time,
  e.`Bid`.`extra` AS extra, e.ts AS ts
FROM nexmark AS e WHERE e.`Bid` IS NOT NULL;
