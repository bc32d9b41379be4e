//! Every MPI tag the runtime uses on its world communicator, in one table.
//!
//! Why one table: two exchanges sharing a tag on one communicator can take each other's
//! messages (a sparse exchange receives from any rank), a bug no single call site shows.
//! Here the values are listed side by side and a test keeps them distinct.
//!
//! Plugins never see these: their messages travel on their redundancy set's own
//! communicator (tags `0..=`[`scr_plugin::MAX_TAG`]). The abort notices of a failed
//! scheme call are not here either: they travel on each set's control communicator
//! (`mpi_host.rs`'s `NOTICE_TAG`), which nothing else sends on. Every tag here is at most
//! `MAX_TAG` too, the smallest `MPI_TAG_UB` the MPI standard allows, so it is valid on
//! every MPI.

/// File moves between ranks at init (a file's length, its pieces, the acks).
pub(crate) const MOVE_TAG: i32 = 7001;

/// The sparse exchange that hands a lost rank its dataset record at restart; it
/// alternates with `TEMPLATE_TAG + 1` between consecutive datasets (see
/// [`super::comm::sparse_exchange`]).
pub(crate) const TEMPLATE_TAG: i32 = 7010;

/// The reports `World::gather_some` brings to rank 0.
pub(crate) const REPORT_TAG: i32 = 7020;

/// The sparse exchange of distribute offers at init (a node replaced).
pub(crate) const OFFER_TAG: i32 = 7030;

/// The outcomes a flush block's members send its leader.
pub(crate) const OUTCOME_TAG: i32 = 7040;

/// Retired: the part references leaders sent rank 0 at flush (the root no longer lists
/// them). Listed so that no new exchange takes its value (the test below keeps every
/// value distinct); nothing sends it.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const RETIRED_PART_TAG: i32 = 7041;

/// The lists rank 0 sends each block leader at fetch from a single-file rank2file map of
/// an earlier release (legacy only).
pub(crate) const SOURCE_TAG: i32 = 7042;

/// The lists a block leader sends its members at fetch.
pub(crate) const LIST_TAG: i32 = 7043;

/// The names a flush block's members send its leader (a resumed flush records the
/// writes).
pub(crate) const WRITES_TAG: i32 = 7044;

/// The three sparse exchanges of a resumed flush's ownership walk (distinct, so that a
/// rank may start the next while another still receives in this one).
pub(crate) const OWNED_TAGS: [i32; 3] = [7045, 7046, 7047];

/// The turn a rank passes to the rank `flush_width` above it in a flush's sliding
/// window (see the `window` module).
pub(crate) const FLUSH_WINDOW_TAG: i32 = 7050;

/// The turn a rank passes to the rank `fetch_width` above it in a fetch's sliding window.
pub(crate) const FETCH_WINDOW_TAG: i32 = 7051;

/// The names sent to their hash owners by the name-clash check at `complete_output`.
pub(crate) const NAME_TAG: i32 = 7060;

/// The two sparse exchanges that find, for each file of a dataset that bypasses the
/// cache, the lowest rank writing it (a shared file is read back by that rank alone):
/// names to their hash owners, then the answers back (distinct, as for [`OWNED_TAGS`]).
pub(crate) const SHARED_TAGS: [i32; 2] = [7061, 7062];

/// A restart by another number of ranks from the old job's caches: the holders' offers
/// of old ranks' files, the requests for their bytes, the bytes, the held members sent
/// to their sets' coordinators and the rebuild plans sent back (distinct, as for
/// [`OWNED_TAGS`]).
pub(crate) const RESIZE_TAGS: [i32; 5] = [7070, 7071, 7072, 7073, 7074];

/// Every tag above (both of [`TEMPLATE_TAG`]'s), for the test that keeps them apart.
#[cfg(test)]
pub(crate) fn all() -> Vec<i32> {
    let mut v = vec![
        MOVE_TAG,
        TEMPLATE_TAG,
        TEMPLATE_TAG + 1,
        REPORT_TAG,
        OFFER_TAG,
        OUTCOME_TAG,
        RETIRED_PART_TAG,
        SOURCE_TAG,
        LIST_TAG,
        WRITES_TAG,
        FLUSH_WINDOW_TAG,
        FETCH_WINDOW_TAG,
        NAME_TAG,
    ];
    v.extend(OWNED_TAGS);
    v.extend(SHARED_TAGS);
    v.extend(RESIZE_TAGS);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_distinct_and_valid_on_every_mpi() {
        let mut tags = all();
        let n = tags.len();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), n, "a tag is used twice: {:?}", all());
        for t in all() {
            assert!(
                t >= 0 && u32::try_from(t).is_ok_and(|t| t <= scr_plugin::MAX_TAG),
                "tag {t} is not below the smallest MPI_TAG_UB"
            );
        }
    }
}
