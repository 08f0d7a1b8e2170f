//! `floe run wordcount`: source → tokenize → key_by(word) → sum → final counts.
//!
//! The keyed sum emits an updated count per record, as Flink's does; a sink
//! chained behind it keeps the latest count per word, and the CLI prints those
//! once the job has finished.

use super::WordcountArgs;
use super::progress::Progress;
use floe::operators::sink::SinkFunction;
use floe::text::{WordGenerator, for_each_word};
use floe::{Record, StreamExecutionEnvironment};
use rustc_hash::FxHashMap;
use std::io::{BufWriter, Write};
use std::sync::{Arc, Mutex};

/// Keeps the latest count per word; hands its map over when the input ends.
#[derive(Clone)]
struct FinalCounts {
    counts: FxHashMap<String, u64>,
    done: Arc<Mutex<Vec<FxHashMap<String, u64>>>>,
}

impl SinkFunction<(String, u64)> for FinalCounts {
    fn invoke(&mut self, (word, count): (String, u64), _: Option<i64>) -> floe::Result<()> {
        match self.counts.get_mut(&word) {
            Some(c) => *c = count,
            None => {
                self.counts.insert(word, count);
            }
        }
        Ok(())
    }

    fn invoke_batch(&mut self, batch: Vec<Record<(String, u64)>>) -> floe::Result<()> {
        for r in batch {
            let (word, count) = r.value;
            match self.counts.get_mut(&word) {
                Some(c) => *c = count,
                None => {
                    self.counts.insert(word, count);
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> floe::Result<()> {
        let counts = std::mem::take(&mut self.counts);
        self.done
            .lock()
            .map_err(|_| floe::Error::User("final counts lock poisoned".into()))?
            .push(counts);
        Ok(())
    }
}

pub fn run(args: &WordcountArgs) -> floe::Result<()> {
    super::check_parallelism(args.parallelism)?;
    if let Some(path) = &args.input {
        super::check_readable(path)?;
    }
    if args.batch_size == 0 {
        return Err(floe::Error::Config(
            "--batch-size must be at least 1".into(),
        ));
    }
    let env = StreamExecutionEnvironment::new();
    env.set_parallelism(args.parallelism);
    env.set_batch_size(args.batch_size);
    if let Some(a) = args.arbiters {
        env.set_arbiters(a);
    }
    let (words, source_name, total) = match &args.input {
        Some(path) => {
            let lines = env.read_text_file(path);
            let words = lines
                .flat_map(|line: String| {
                    let mut out = Vec::new();
                    for_each_word(&line, |w| out.push((w, 1u64)));
                    out
                })
                .name("Tokenize");
            (words, "Text File Source", None)
        }
        None => {
            let generator = Arc::new(WordGenerator::new(args.vocabulary, args.seed));
            let words = env
                .from_generator(args.records, move |i| (generator.word(i), 1u64))
                .name("Word Generator");
            (words, "Word Generator", Some(args.records))
        }
    };
    let done = Arc::new(Mutex::new(Vec::new()));
    words
        .key_by_field(|t: &(String, u64)| &t.0)
        .sum(|t: &mut (String, u64)| &mut t.1)
        .add_sink(FinalCounts {
            counts: FxHashMap::default(),
            done: done.clone(),
        })
        .name("Final Counts");
    let handle = env.execute_async()?;
    let result = {
        let _progress = Progress::start(&handle, source_name, total);
        futures::executor::block_on(handle.wait())?
    };
    let records = result
        .operator("Keyed Sum")
        .map(|o| o.records_in)
        .unwrap_or(0);

    let maps = std::mem::take(
        &mut *done
            .lock()
            .map_err(|_| floe::Error::User("lock poisoned".into()))?,
    );
    write_counts(args, &maps)?;

    let secs = result.elapsed.as_secs_f64();
    let rps = if secs > 0.0 {
        records as f64 / secs
    } else {
        0.0
    };
    eprintln!(
        "records={} elapsed_ms={} throughput_rps={:.0} parallelism={}",
        records,
        result.elapsed.as_millis(),
        rps,
        args.parallelism
    );
    Ok(())
}

fn write_counts(args: &WordcountArgs, maps: &[FxHashMap<String, u64>]) -> floe::Result<()> {
    let write = |w: &mut dyn Write| -> std::io::Result<()> {
        for m in maps {
            for (word, count) in m {
                writeln!(w, "{word},{count}")?;
            }
        }
        w.flush()
    };
    match &args.output {
        Some(path) => {
            let f = std::fs::File::create(path)
                .map_err(|e| floe::Error::io("cannot create output file", path, e))?;
            write(&mut BufWriter::new(f)).map_err(|e| floe::Error::io("cannot write", path, e))
        }
        None => {
            let stdout = std::io::stdout();
            let mut lock = BufWriter::new(stdout.lock());
            match write(&mut lock) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                r => r.map_err(|e| floe::Error::io("cannot write", "stdout", e)),
            }
        }
    }
}
