//! `scr-sets-probe SET_SIZE [HOP_DISTANCE]`: forms this rank's redundancy set the way init does
//! (`form_my_set`, no rank learning every rank's group value), with rank r's group value
//! the r-th name of `SCR_NODE_NAMES`, and writes to `sets_<rank>.txt` in the working
//! directory the world size, the set, its communicator's size and rank, the members'
//! values, and the world ranks that share this rank's value (`split_by_value`).

use scr_api::mpi;
use scr_api::mpi::traits::{Communicator, CommunicatorCollectives};

fn main() {
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let rank = world.rank();
    let set_size: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .expect("usage: scr-sets-probe SET_SIZE [HOP_DISTANCE]");
    let hop: usize = std::env::args()
        .nth(2)
        .map_or(Some(1), |a| a.parse().ok())
        .expect("usage: scr-sets-probe SET_SIZE [HOP_DISTANCE]");
    let names = std::env::var("SCR_NODE_NAMES").expect("SCR_NODE_NAMES is set");
    let value = names
        .split(',')
        .nth(usize::try_from(rank).expect("a rank is never negative"))
        .expect("one name per rank")
        .to_string();
    let (set, comm, values) = scr_host::runtime::form_my_set(&world, &value, set_size, hop);
    let same = scr_host::runtime::split_by_value(&world, &value);
    let mut peers = vec![0i32; usize::try_from(same.size()).expect("a size is never negative")];
    same.all_gather_into(&rank, &mut peers[..]);
    let report = format!(
        "world size {}\nset {} members {:?}\ncomm rank {} of {}\nvalues {:?}\nsame value {:?}\n",
        world.size(),
        set.id,
        set.members,
        comm.rank(),
        comm.size(),
        values,
        peers
    );
    std::fs::write(format!("sets_{rank}.txt"), report).expect("the report is written");
}
