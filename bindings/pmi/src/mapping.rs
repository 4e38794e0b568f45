//! `PMI_process_mapping`: MPICH's block notation of which node each rank runs on,
//! `(vector,(start,nodes,ranks_per_node),…)`; blocks place ranks in order, node by
//! node, and may name a node again (cyclic layouts).

/// The ranks on `rank`'s node, in order (just `rank` when `mapping` cannot be read
/// or does not place it: a rank alone is always a true, if pessimistic, answer).
pub fn clique(mapping: &str, rank: u32, size: u32) -> Vec<u32> {
    let nodes = match nodes_of(mapping, size) {
        Some(nodes) => nodes,
        None => return vec![rank],
    };
    match nodes.get(rank as usize) {
        Some(&mine) => (0..size).filter(|&r| nodes[r as usize] == mine).collect(),
        None => vec![rank],
    }
}

/// Each rank's node, for ranks `0..size`; `None` for anything but a vector that
/// places every one of them.
fn nodes_of(mapping: &str, size: u32) -> Option<Vec<u32>> {
    let body = mapping.trim().strip_prefix("(vector,")?.strip_suffix(')')?;
    let mut nodes = Vec::with_capacity(size as usize);
    for block in body.split("),") {
        let block = block.trim().trim_start_matches('(').trim_end_matches(')');
        let mut numbers = block.split(',').map(|n| n.trim().parse::<u32>().ok());
        let (start, count, per_node) = (numbers.next()??, numbers.next()??, numbers.next()??);
        if numbers.next().is_some() || per_node == 0 {
            return None;
        }
        for node in start..start.checked_add(count)? {
            for _ in 0..per_node {
                if nodes.len() == size as usize {
                    return Some(nodes);
                }
                nodes.push(node);
            }
        }
    }
    (nodes.len() == size as usize).then_some(nodes)
}

#[cfg(test)]
mod tests {
    use super::clique;

    #[test]
    fn blocks_place_ranks_node_by_node() {
        let mapping = "(vector,(0,3,2))";
        assert_eq!(clique(mapping, 0, 6), [0, 1]);
        assert_eq!(clique(mapping, 3, 6), [2, 3]);
        assert_eq!(clique(mapping, 5, 6), [4, 5]);
    }

    #[test]
    fn a_short_last_node_and_a_cyclic_layout_are_read() {
        // 5 ranks, 2 per node: the last node holds one.
        assert_eq!(clique("(vector,(0,3,2))", 4, 5), [4]);
        // Round robin over two nodes: node 0 holds ranks 0 and 2.
        assert_eq!(clique("(vector,(0,2,1),(0,2,1))", 2, 4), [0, 2]);
        assert_eq!(clique("(vector,(0,2,1),(0,2,1))", 3, 4), [1, 3]);
    }

    #[test]
    fn what_cannot_be_read_leaves_a_rank_alone() {
        for mapping in [
            "",
            "(vector)",
            "(vector,(0,2))",
            "(vector,(0,x,2))",
            "(vector,(0,1,2))", // places 2 of 4
            "(vector,(0,1,0))",
            "(hash,(0,1,2))",
            "(vector,(0,4294967295,1))",
        ] {
            assert_eq!(clique(mapping, 1, 4), [1], "{mapping:?}");
        }
    }
}
