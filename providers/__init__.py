"""The state providers shipped with statestream, registered by entry points like a third party's."""
