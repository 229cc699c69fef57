"""Linear filters for HMM beliefs: why linear recurrent memory works in POMDPs."""
