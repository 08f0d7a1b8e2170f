//! Unit tests of the plan on small graphs: validation errors, chaining
//! decisions, channel counts and pipelined regions, each against a figure
//! computed by hand from the graph (or by brute force over its channels).

use super::*;

const OPTIONS: PlanOptions = PlanOptions {
    chaining: true,
    max_parallelism: 128,
};

fn source(name: &str, p: usize) -> NodeShape {
    NodeShape {
        name: name.into(),
        uid: None,
        parallelism: p,
        chainable: true,
        head: false,
        suspends: false,
        source: true,
        transactional: false,
        inputs: Vec::new(),
    }
}

fn op(name: &str, p: usize, inputs: Vec<EdgeShape>) -> NodeShape {
    NodeShape {
        source: false,
        inputs,
        ..source(name, p)
    }
}

fn edge(from: NodeId, kind: PartitionKind) -> EdgeShape {
    EdgeShape {
        from,
        port: Port::Main,
        kind,
        explicit: kind != PartitionKind::Forward,
        can_rebalance: false,
    }
}

/// A default edge: forward, may chain, falls back to rebalance.
fn default_edge(from: NodeId) -> EdgeShape {
    EdgeShape {
        explicit: false,
        can_rebalance: true,
        ..edge(from, PartitionKind::Forward)
    }
}

#[test]
fn validation_errors_name_the_operator() {
    assert_eq!(Plan::new(vec![], OPTIONS).unwrap_err(), PlanError::Empty);
    let zero = Plan::new(vec![source("src", 0)], OPTIONS).unwrap_err();
    assert_eq!(
        zero,
        PlanError::ZeroParallelism {
            operator: "src".into()
        }
    );
    let keyed = Plan::new(
        vec![
            source("src", 1),
            op("sum", 200, vec![edge(0, PartitionKind::Hash)]),
        ],
        OPTIONS,
    )
    .unwrap_err();
    assert_eq!(
        keyed,
        PlanError::KeyedAboveMax {
            operator: "sum".into(),
            parallelism: 200,
            max: 128
        }
    );
    // Any operator, keyed or not, has at most max parallelism subtasks.
    let above = Plan::new(
        vec![source("src", 129), op("map", 1, vec![default_edge(0)])],
        OPTIONS,
    )
    .unwrap_err();
    assert_eq!(
        above,
        PlanError::AboveMax {
            operator: "src".into(),
            parallelism: 129,
            max: 128
        }
    );
    assert!(Plan::new(vec![source("src", 128)], OPTIONS).is_ok());
    let forward = Plan::new(
        vec![
            source("src", 1),
            op(
                "map",
                2,
                vec![edge(0, PartitionKind::Forward)]
                    .into_iter()
                    .map(|e| EdgeShape {
                        explicit: true,
                        ..e
                    })
                    .collect(),
            ),
        ],
        OPTIONS,
    )
    .unwrap_err();
    assert!(matches!(
        forward,
        PlanError::ForwardMismatch { up: 1, down: 2, .. }
    ));
    let no_fallback = Plan::new(
        vec![
            source("src", 1),
            op(
                "map",
                2,
                vec![EdgeShape {
                    can_rebalance: false,
                    ..default_edge(0)
                }],
            ),
        ],
        OPTIONS,
    )
    .unwrap_err();
    assert!(matches!(no_fallback, PlanError::CannotRebalance { .. }));
    let cycle = Plan::new(
        vec![source("src", 1), op("loop", 1, vec![default_edge(1)])],
        OPTIONS,
    )
    .unwrap_err();
    assert_eq!(cycle, PlanError::Cycle);
    // The messages users see are the ones `Error::Config` always carried.
    assert_eq!(
        zero.to_string(),
        "operator 'src' has parallelism 0; it must be at least 1"
    );
}

#[test]
fn chaining_follows_default_edges_of_equal_parallelism() {
    // src(2) -> map(2) -> [hash] sum(2) -> sink(2); other(1) <- map (forward, 1 vs 2)
    let nodes = vec![
        source("src", 2),
        op("map", 2, vec![default_edge(0)]),
        op("sum", 2, vec![edge(1, PartitionKind::Hash)]),
        op("sink", 2, vec![default_edge(2)]),
        op("other", 1, vec![default_edge(1)]),
    ];
    let plan = Plan::new(nodes, OPTIONS).unwrap();
    assert_eq!(plan.chained, vec![false, true, false, true, false]);
    assert_eq!(plan.heads, vec![0, 2, 4]);
    assert_eq!(plan.vertex_of, vec![0, 0, 1, 1, 2]);
    assert_eq!(plan.vertex_name(0), "src -> map");
    // The default edge between parallelisms 2 and 1 became a rebalance.
    assert_eq!(plan.nodes[4].inputs[0].kind, PartitionKind::Rebalance);
    assert!(plan.nodes[4].inputs[0].explicit);

    let unchained = Plan::new(
        plan.nodes.clone(),
        PlanOptions {
            chaining: false,
            ..OPTIONS
        },
    )
    .unwrap();
    assert!(unchained.chained.iter().all(|c| !c));
    assert_eq!(unchained.heads, vec![0, 1, 2, 3, 4]);
}

#[test]
fn a_suspending_operator_is_not_chained_behind_a_source() {
    let mut flat_map = op("flat_map", 1, vec![default_edge(1)]);
    flat_map.suspends = true;
    let mut after_op = op("flat_map2", 1, vec![default_edge(2)]);
    after_op.suspends = true;
    let mut disabled = op("map2", 1, vec![default_edge(3)]);
    disabled.chainable = false;
    let nodes = vec![
        source("src", 1),
        op("map", 1, vec![default_edge(0)]),
        flat_map,
        after_op,
        disabled,
    ];
    let plan = Plan::new(nodes, OPTIONS).unwrap();
    // map chains to the source; flat_map would join the source's chain and
    // heads its own; flat_map2 follows flat_map's (non-source) chain.
    assert_eq!(plan.chained, vec![false, true, false, true, false]);
}

#[test]
fn channel_counts_match_the_edge_patterns() {
    for (kind, up, down) in [
        (PartitionKind::Hash, 3, 4),
        (PartitionKind::Rebalance, 2, 5),
        (PartitionKind::Rescale, 2, 5),
        (PartitionKind::Rescale, 6, 2),
        (PartitionKind::Broadcast, 1, 3),
    ] {
        let plan = Plan::new(
            vec![source("src", up), op("sink", down, vec![edge(0, kind)])],
            OPTIONS,
        )
        .unwrap();
        use floe_actors::partitioner::Pattern;
        let per_down = plan.inputs_per_subtask[1].clone();
        match kind.pattern() {
            // Every upstream subtask sends to every downstream one.
            Pattern::AllToAll => assert_eq!(per_down, vec![up; down], "{kind:?}"),
            Pattern::Pointwise => assert_eq!(per_down, vec![1; down], "{kind:?}"),
            // A local subset: every subtask on both sides has a channel,
            // and there are as many channels as the larger side.
            Pattern::Rescale => {
                assert!(per_down.iter().all(|&n| n >= 1), "{up}->{down}");
                assert_eq!(per_down.iter().sum::<usize>(), up.max(down));
                for i in 0..up {
                    assert!(plan.channels.keys().any(|k| k.2 == i), "{up}->{down}");
                }
            }
        }
        assert_eq!(plan.channels.len(), per_down.iter().sum::<usize>());
        // Channel ids of each receiver are 0..n, each once.
        for (j, &n) in per_down.iter().enumerate() {
            let mut ids: Vec<u32> = plan
                .channels
                .iter()
                .filter(|(k, _)| k.3 == j)
                .map(|(_, c)| c.0)
                .collect();
            ids.sort_unstable();
            assert_eq!(ids, (0..n as u32).collect::<Vec<_>>());
        }
    }
}

#[test]
fn regions_are_the_connected_components() {
    // Two independent pipelines of parallelism 2 with forward edges: four
    // regions (one per pipeline and subtask); then a keyed edge joins a
    // pipeline's subtasks into one region.
    let unchained = PlanOptions {
        chaining: false,
        ..OPTIONS
    };
    let nodes = vec![
        source("a", 2),
        op("a_sink", 2, vec![default_edge(0)]),
        source("b", 2),
        op("b_sink", 2, vec![default_edge(2)]),
    ];
    let plan = Plan::new(nodes, unchained).unwrap();
    let (region_of, members) = plan.regions();
    assert_eq!(members.len(), 4);
    // vertex (a, 0) and (a_sink, 0) share a region, (a, 1) is elsewhere.
    assert_eq!(region_of[&(0, 0)], region_of[&(1, 0)]);
    assert_ne!(region_of[&(0, 0)], region_of[&(0, 1)]);
    assert_ne!(region_of[&(0, 0)], region_of[&(2, 0)]);

    let keyed = vec![
        source("a", 2),
        op("sum", 2, vec![edge(0, PartitionKind::Hash)]),
        source("b", 2),
        op("b_sink", 2, vec![default_edge(2)]),
    ];
    let plan = Plan::new(keyed, unchained).unwrap();
    let (region_of, members) = plan.regions();
    assert_eq!(members.len(), 3);
    let all_a: Vec<usize> = [(0, 0), (0, 1), (1, 0), (1, 1)]
        .iter()
        .map(|k| region_of[k])
        .collect();
    assert!(all_a.iter().all(|&r| r == all_a[0]));
    // Every subtask is in exactly one region.
    let total: usize = members.iter().map(Vec::len).sum();
    assert_eq!(total, 8);
}

#[test]
fn uids_are_the_users_or_derived_from_position() {
    let mut named = source("src", 1);
    named.uid = Some("my-source".into());
    let plan = Plan::new(vec![named, op("map", 1, vec![default_edge(0)])], OPTIONS).unwrap();
    assert_eq!(plan.uid(0), "my-source");
    assert_eq!(plan.uid(1), "1:map");
}

/// A throttled operator heads its chain (its rate counts the records it
/// receives); the operators after it still chain into it.
#[test]
fn a_throttled_operator_heads_its_chain() {
    let throttled = NodeShape {
        head: true,
        ..op("sink", 2, vec![default_edge(1)])
    };
    let plan = Plan::new(
        vec![
            source("src", 2),
            op("map", 2, vec![default_edge(0)]),
            throttled,
            op("after", 2, vec![default_edge(2)]),
        ],
        OPTIONS,
    )
    .unwrap();
    assert_eq!(plan.chained, vec![false, true, false, true]);
    assert_eq!(plan.heads, vec![0, 2]);
}
