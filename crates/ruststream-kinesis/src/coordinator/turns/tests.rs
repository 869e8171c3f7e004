use super::Turns;

fn names(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i}")).collect()
}

fn shard(i: usize) -> String {
    format!("shardId-{i:012}")
}

/// Whose turn `shard` is, as each of `instances` judges it knowing all of them.
fn takers(instances: &[String], shard: &str) -> Vec<usize> {
    (0..instances.len())
        .filter(|&i| Turns::new(&instances[i], instances.iter().map(String::as_str)).is_mine(shard))
        .collect()
}

#[test]
fn each_free_shard_is_one_instances_turn() {
    let instances = names("instance", 10);
    let mut counts = vec![0_usize; instances.len()];
    for i in 0..1_000 {
        let takers = takers(&instances, &shard(i));
        assert_eq!(takers.len(), 1, "{}: {takers:?}", shard(i));
        counts[takers[0]] += 1;
    }
    // An even split is 100 each; a hash's spread stays well within this.
    assert!(
        counts.iter().all(|&count| (60..=140).contains(&count)),
        "{counts:?}"
    );
}

#[test]
fn an_instance_that_joins_moves_only_the_shards_whose_turn_it_wins() {
    let before = names("instance", 5);
    let mut after = before.clone();
    after.push("instance-new".to_owned());
    let (mut moved, mut won) = (0, 0);
    for i in 0..1_000 {
        let (was, is) = (takers(&before, &shard(i))[0], takers(&after, &shard(i))[0]);
        if is == 5 {
            won += 1;
        } else if was != is {
            moved += 1;
        }
    }
    assert_eq!(moved, 0, "no shard moves between the instances that stay");
    assert!(
        (100..=250).contains(&won),
        "the new instance's turns: {won}"
    );
}

#[test]
fn alone_every_free_shard_is_this_instances_turn() {
    let turns = Turns::new("instance-a", ["instance-a"]);
    assert!(turns.alone());
    assert!((0..100).all(|i| turns.is_mine(&shard(i))));
    let turns = Turns::new("instance-a", ["instance-b"]);
    assert!(!turns.alone());
    assert!(!(0..100).all(|i| turns.is_mine(&shard(i))));
}

#[test]
fn the_weights_are_the_same_on_every_build() {
    // The published figures of FNV-1a ("a") and of SplitMix64 (its first output from the seed
    // 0): a change of either would split a fleet of two builds differently.
    assert_eq!(super::key("a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(super::finish(0x9e37_79b9_7f4a_7c15), 0xe220_a839_7b1d_cdaf);
}
