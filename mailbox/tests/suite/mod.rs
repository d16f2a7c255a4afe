mod child;
mod common;
mod contract;
mod crash;
mod faults;
mod group_commit;
mod live;
mod races;
